import CovenKit
import Foundation

/// `coven lost`: the lost values of concurrent edits, and restoring one.
struct LostCommand: Command {
    static let name = "lost"
    static let abstract = "list the values lost to concurrent edits, or restore one"
    static let synopsis = ["[--json] [-z]", "restore ID"]
    static let discussion = """
    When two devices edit one row without seeing each other's edit, the later write wins the \
    whole row and the other is kept here as a lost value. A row taken out (its parent deleted \
    elsewhere, or naming a deleted file record) is listed too, and cannot be restored; one taken \
    out for its parent comes back by itself (marked restored) when a later write elsewhere keeps \
    that parent, as on the devices where it never left. One line \
    per value, newest first: id, table, row id, why (concurrent, parent_deleted, file_deleted), \
    its stamp, and 'restored' once restored (with -z six fields, each ended by NUL, the last empty until restored). 'restore ID' writes the lost values back as a new \
    write of this device, published at the next sync; prints the write's stamp.
    """
    static let options = [CommandContext.nulTerminatedOption]
    static let arguments = [
        ArgumentSpec("ACTION", help: "restore a lost value", optional: true, choices: ["restore"]),
        ArgumentSpec("ID", help: "the lost value's id", optional: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        if let action = invocation.arguments.first {
            guard action == "restore" else { throw CovenError(.usage, "the only action is 'restore'") }
            guard invocation.arguments.count == 2, let id = Int64(invocation.arguments[1]) else {
                throw CovenError(.usage, "restore takes the numeric ID 'coven lost' lists")
            }
            let device = try context.openDevice()
            let stamp = try device.restoreLost(id)
            if context.json { try context.printJSON(["restored": id, "stamp": stamp]) } else { context.line(stamp) }
            return 0
        }
        let device = try context.openDeviceReadOnly()
        let values = try device.lostValues()
        if context.json {
            try context.printJSON(values.map { lost -> [String: Any] in
                var values: [String: Any] = [:]
                for (column, value) in lost.values { values[column] = jsonValue(value) }
                return ["id": lost.id, "table": lost.table, "row": lost.rowID, "values": values, "stamp": lost.stamp, "device": lost.device,
                        "winner_stamp": lost.winnerStamp ?? NSNull(), "lost_at": lost.lostAt, "why": lost.why,
                        "restorable": lost.restorable && lost.restoredAt == nil, "restored_at": lost.restoredAt ?? NSNull()]
            })
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
