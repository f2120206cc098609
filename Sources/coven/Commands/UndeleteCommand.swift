import CovenKit
import Foundation

/// `coven undelete`: bring deleted rows back from the trash as a new write.
struct UndeleteCommand: Command {
    static let name = "undelete"
    static let abstract = "bring deleted rows back from the trash, with their files and the rows deleted with them"
    static let synopsis = ["TABLE ID...", "--change DEVICE:SEQ"]
    static let discussion = """
    Writes the rows back as one new write of this device, in one transaction: their last \
    values with a new stamp, later than the delete's, so the write wins on every device and \
    every device applies it as any other change (published at the next sync); the file records \
    they named, with the newest place this device knows; and the rows deleted with them (a \
    cascade of the same change). --change brings back every row that one published change \
    deleted ('coven trash' and the warning of 'coven sync' name it). All or nothing: a row not \
    in the trash, a row of a circle this device's member is not in (not_in_circle), another \
    member's row of an owner-only table (not_owner), or a file whose bytes are gone \
    (bytes_absent, naming the file: gc freed them after the store's retention window, or \
    after 'coven trash empty') changes nothing.

    Prints the rows that came back, one a line (table, id, tab-separated), or with --json one \
    object: rows (each {table, id}), files, and the write's stamp.
    """
    static let options: [OptionSpec] = [
        OptionSpec("change", value: "DEVICE:SEQ", help: "bring back every row this published change deleted"),
    ]
    static let arguments = [
        ArgumentSpec("TABLE", help: "the synced table of the rows", optional: true),
        ArgumentSpec("ID", help: "the id of a row to bring back", optional: true, repeating: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let report: UndeleteReport
        if let text = invocation.value("change") {
            guard invocation.arguments.isEmpty else { throw CovenError(.usage, "--change takes no TABLE or ID", hint: "coven undelete --change DEVICE:SEQ") }
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, let seq = Int64(parts[1]), seq > 0 else {
                throw CovenError(.usage, "option '--change' takes DEVICE:SEQ (as 'coven trash' prints it), not '\(text)'")
            }
            let device = try context.openDevice()
            report = try Undelete(device).change(device: String(parts[0]), seq: seq)
        } else {
            guard invocation.arguments.count >= 2 else {
                throw CovenError(.usage, "undelete takes TABLE and at least one ID, or --change DEVICE:SEQ", hint: "'coven trash' lists what can come back")
            }
            let device = try context.openDevice()
            report = try Undelete(device).rows(table: invocation.arguments[0], ids: Array(invocation.arguments.dropFirst()))
        }
        if context.json {
            try context.printJSON(["rows": report.rows.map { ["table": $0.table, "id": $0.id] }, "files": report.files, "stamp": report.stamp])
        } else {
            for row in report.rows { try context.record([row.table, row.id], nulTerminated: false) }
        }
        return 0
    }
}
