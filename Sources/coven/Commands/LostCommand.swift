import CovenKit
import Foundation

/// `coven lost`: the lost values of concurrent edits, restoring one, forgetting them.
struct LostCommand: Command {
    static let name = "lost"
    static let abstract = "list the values lost to concurrent edits, restore one, or drop them"
    static let synopsis = ["[--json] [-z]", "restore ID", "drop ID...", "drop --all", "drop --before TIME"]
    static let discussion = """
    When two devices edit one row without seeing each other's edit, the later write wins the \
    whole row and the other is kept here as a lost value. A row taken out (its parent deleted \
    elsewhere, or naming a deleted file record) is listed too, and cannot be restored; one taken \
    out for its parent comes back by itself (marked restored) when a later write elsewhere keeps \
    that parent, as on the devices where it never left. One line \
    per value, newest first: id, table, row id, why (concurrent, parent_deleted, file_deleted, or \
    not_authorized and not_owner: an entry of another device's change that its writer was not \
    allowed to write, refused and never applied, which cannot be restored), \
    its stamp, and 'restored' once restored (with -z six fields, each ended by NUL, the last empty until restored). 'restore ID' writes the lost values back as a new \
    write of this device, published at the next sync; prints the write's stamp.

    Lost values are kept on this device only, until dropped: a restorable one keeps the stored \
    bytes it names from gc for as long as it is kept. 'drop ID...' forgets the values given (all \
    or none), 'drop --all' every one, 'drop --before TIME' those lost before TIME (an ISO 8601 \
    date, 2026-11-01, or time, 2026-11-01T12:00:00Z). A row taken out for its parent is not \
    dropped until it has come back (it still may); prints the ids dropped, one a line.
    """
    static let options: [OptionSpec] = [
        OptionSpec("all", help: "drop every lost value"),
        OptionSpec("before", value: "TIME", help: "drop the values lost before TIME (ISO 8601, UTC unless it says)"),
        CommandContext.nulTerminatedOption,
    ]
    static let arguments = [
        ArgumentSpec("ACTION", help: "restore a lost value, or drop lost values", optional: true, choices: ["restore", "drop"]),
        ArgumentSpec("ID", help: "the lost value's id", optional: true, repeating: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        if invocation.arguments.first == "drop" { return try drop(invocation, context) }
        if invocation.has("all") || invocation.has("before") {
            throw CovenError(.usage, "--all and --before go with 'drop'", hint: "coven lost drop --all")
        }
        if let action = invocation.arguments.first {
            guard action == "restore" else { throw CovenError(.usage, "the actions are 'restore' and 'drop'") }
            guard invocation.arguments.count == 2, let id = Int64(invocation.arguments[1]) else {
                throw CovenError(.usage, "restore takes the numeric ID 'coven lost' lists")
            }
            let device = try context.openDevice()
            let stamp = try StoreSync(device).restoreLost(id)
            if context.json { try context.printJSON(["restored": id, "stamp": stamp]) } else { context.line(stamp) }
            return 0
        }
        let device = try context.openDeviceReadOnly()
        let values = try StoreSync(device).lostValues()
        if context.json {
            // The array a value at a time, as JSONText.render would print it whole.
            let writer = JSONText.Writer()
            context.out.write("[")
            for (index, lost) in values.enumerated() {
                var values: [String: Any] = [:]
                for (column, value) in lost.values { values[column] = jsonValue(value) }
                let object: [String: Any] = [
                    "id": lost.id, "table": lost.table, "row": lost.rowID, "values": values, "stamp": lost.stamp, "device": lost.device,
                    "winner_stamp": lost.winnerStamp ?? NSNull(), "lost_at": lost.lostAt, "why": lost.why,
                    "restorable": lost.restorable && lost.restoredAt == nil, "restored_at": lost.restoredAt ?? NSNull()]
                var text = index > 0 ? "," : ""
                try writer.write(object, into: &text)
                context.out.write(text)
            }
            context.out.write("]\n")
        } else {
            let zero = invocation.has("null-terminated")
            for lost in values {
                // Under -z every record has six fields, the last empty unless restored.
                var fields = [String(lost.id), lost.table, lost.rowID, lost.why, lost.stamp]
                if zero || lost.restoredAt != nil { fields.append(lost.restoredAt == nil ? "" : "restored") }
                try context.record(fields, nulTerminated: zero)
            }
        }
        return 0
    }

    /// `drop ID...`, `drop --all`, `drop --before TIME`.
    static func drop(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let ids = invocation.arguments.dropFirst()
        let forms = [!ids.isEmpty, invocation.has("all"), invocation.has("before")].filter { $0 }.count
        guard forms == 1 else {
            throw CovenError(.usage, "drop takes IDs, --all or --before TIME (one of them)", hint: "coven lost drop --all")
        }
        let device = try context.openDevice()
        let dropped: [Int64]
        if let text = invocation.value("before") {
            guard let time = parseTime(text) else {
                throw CovenError(.usage, "option '--before' takes an ISO 8601 date or time (2026-11-01, 2026-11-01T12:00:00Z), not '\(text)'")
            }
            dropped = try StoreSync(device).dropLost(before: time)
        } else if invocation.has("all") {
            dropped = try StoreSync(device).dropLost(before: nil)
        } else {
            let numbers = try ids.map { text -> Int64 in
                guard let id = Int64(text) else { throw CovenError(.usage, "drop takes the numeric IDs 'coven lost' lists, not '\(text)'") }
                return id
            }
            dropped = try StoreSync(device).dropLost(numbers)
        }
        if context.json { try context.printJSON(["dropped": dropped]) } else { for id in dropped { context.line(String(id)) } }
        return 0
    }

    /// An ISO 8601 date (midnight UTC) or date and time (UTC unless it names a zone).
    static func parseTime(_ text: String) -> Date? {
        let dateTime = ISO8601DateFormatter()
        if let date = dateTime.date(from: text) { return date }
        dateTime.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = dateTime.date(from: text) { return date }
        if let date = dateTime.date(from: text + "Z") { return date }
        dateTime.formatOptions = [.withInternetDateTime]
        if let date = dateTime.date(from: text + "Z") { return date }
        dateTime.formatOptions = [.withFullDate]
        return dateTime.date(from: text)
    }

    static func jsonValue(_ value: SQLValue) -> Any {
        switch value {
        case .null: return NSNull()
        case .integer(let v): return v
        case .real(let v): return v
        case .text(let v): return v
        case .blob(let v): return ["base64": Data(v).base64EncodedString()]
        }
    }
}
