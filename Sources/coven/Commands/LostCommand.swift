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
        if context.json {
            // The array a value at a time, as read, in the text JSONText.render would give it
            // whole: the fixed keys written in its order, each value's columns in the order
            // the writer finds once per set of columns.
            let writer = JSONText.Writer()
            context.out.write("[")
            var first = true
            try StoreSync(device).forEachLostValue { lost in
                context.out.write((first ? "" : ",") + (try jsonObject(lost, writer: writer)))
                first = false
            }
            context.out.write("]\n")
        } else {
            let zero = invocation.has("null-terminated")
            try StoreSync(device).forEachLostValue { lost in
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
        if let time = try invocation.time("before") {
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

    /// One lost value as the JSON object `lost --json` prints, the text JSONText.render gives
    /// (keys sorted as Foundation sorts them), written by hand: Foundation's serializer costs
    /// more than reading the value.
    static func jsonObject(_ lost: LostValue, writer: JSONText.Writer) throws -> String {
        var text = "{\"device\":"
        JSONText.Writer.writeString(lost.device, into: &text)
        text += ",\"id\":" + String(lost.id) + ",\"lost_at\":"
        JSONText.Writer.writeString(lost.lostAt, into: &text)
        text += ",\"restorable\":" + (lost.restorable && lost.restoredAt == nil ? "true" : "false") + ",\"restored_at\":"
        writeOptional(lost.restoredAt, into: &text)
        text += ",\"row\":"
        JSONText.Writer.writeString(lost.rowID, into: &text)
        text += ",\"stamp\":"
        JSONText.Writer.writeString(lost.stamp, into: &text)
        text += ",\"table\":"
        JSONText.Writer.writeString(lost.table, into: &text)
        text += ",\"values\":{"
        for (index, column) in try writer.order(of: lost.values).enumerated() {
            if index > 0 { text += "," }
            JSONText.Writer.writeString(column, into: &text)
            text += ":"
            try writeValue(lost.values[column] ?? .null, into: &text)
        }
        text += "},\"why\":"
        JSONText.Writer.writeString(lost.why, into: &text)
        text += ",\"winner_stamp\":"
        writeOptional(lost.winnerStamp, into: &text)
        return text + "}"
    }

    /// A JSON string, or null.
    static func writeOptional(_ text: String?, into out: inout String) {
        if let text { JSONText.Writer.writeString(text, into: &out) } else { out += "null" }
    }

    /// A column's value as ``jsonValue(_:)`` renders it: a REAL through Foundation (its
    /// shortest form), a BLOB as `{"base64": ...}`.
    static func writeValue(_ value: SQLValue, into out: inout String) throws {
        switch value {
        case .null: out += "null"
        case .integer(let v): out += String(v)
        case .text(let v): JSONText.Writer.writeString(v, into: &out)
        case .real, .blob: out += try JSONText.render(jsonValue(value))
        }
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
