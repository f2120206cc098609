import CovenKit
import Foundation

/// `coven trash`: what was deleted and can still come back; emptying it; the store's window.
struct TrashCommand: Command {
    static let name = "trash"
    static let abstract = "list the rows deleted within the store's retention window, empty the trash, or set the window"
    static let synopsis = ["[--table TABLE] [--since TIME] [--json] [-z]", "empty (--all | --before TIME)", "retention [DURATION]"]
    static let discussion = """
    Every device keeps the last image of each row deleted on any device (by a write here, or \
    by a change a pull applied), with who deleted it and in which change, the row whose delete \
    took it along (a cascade), and the files it named; and gc keeps those files' stored bytes \
    for the store's retention window (30 days unless an admin set it). 'coven undelete' brings \
    rows back.

    Lists the rows deleted within the window, newest first: one line per row with eight \
    fields, tab-separated (with -z each ended by NUL): table, id, when it was deleted, the \
    change that deleted it (DEVICE:SEQ, or 'unpublished' for this device's delete not yet \
    published), the deleting device's name, the row deleted with it ('TABLE/ID', or '-'), its \
    files as 'ID:SIZE' separated by commas ('-' for none), and its last values as one JSON \
    object. With --json, an array of objects (docs/json.md). Rows of a circle this device's \
    member is not in, and other members' rows of an owner-only table, are not listed.

    'empty' drops rows from this device's trash (every one with --all, or those deleted before \
    TIME): their bytes no longer wait for the window, and the next 'coven gc' frees them; \
    prints how many rows were dropped. 'retention' prints the store's window; 'retention \
    DURATION' sets it (a number with a unit: 90d, 12h, 30m, 45s; a bare number is days), an \
    admin's setting published at the next sync; 'retention 0' turns the trash off for the \
    store (deletes are final, and gc frees bytes as soon as every device has seen the delete). \
    A trashed row stays after the window until gc freed its bytes, so 'coven undelete' can say \
    'bytes_absent'.
    """
    static let options: [OptionSpec] = [
        OptionSpec("table", value: "TABLE", help: "list only the rows of TABLE"),
        OptionSpec("since", value: "TIME", help: "list only the rows deleted at or after TIME (ISO 8601, UTC unless it says)"),
        OptionSpec("all", help: "empty: drop every row"),
        OptionSpec("before", value: "TIME", help: "empty: drop the rows deleted before TIME"),
        CommandContext.nulTerminatedOption,
    ]
    static let arguments = [
        ArgumentSpec("ACTION", help: "empty the trash, or show or set the retention window", optional: true, choices: ["empty", "retention"]),
        ArgumentSpec("DURATION", help: "the new retention window", optional: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let action = invocation.arguments.first
        switch action {
        case "empty": return try empty(invocation, context)
        case "retention": return try retention(invocation, context)
        case nil: break
        default: throw CovenError(.usage, "the actions are 'empty' and 'retention'")
        }
        if invocation.has("all") || invocation.has("before") {
            throw CovenError(.usage, "--all and --before go with 'empty'", hint: "coven trash empty --all")
        }
        let since = try invocation.time("since")
        let device = try context.openDeviceReadOnly()
        let table = invocation.value("table")
        if let table, device.manifest.table(table) == nil {
            throw CovenError(.usage, "'\(table)' is not a synced table of this store")
        }
        let trash = Trash(device)
        if context.json {
            // The array a row at a time, as read: never the whole trash in memory.
            let writer = JSONText.Writer()
            var order: (columns: [String], positions: [Int]) = ([], [])
            context.out.write("[")
            var first = true
            try trash.forEach(table: table, since: since) { row in
                context.out.write((first ? "" : ",") + (try jsonObject(row, writer: writer, order: &order)))
                first = false
            }
            context.out.write("]\n")
            return 0
        }
        let zero = invocation.has("null-terminated")
        try trash.forEach(table: table, since: since) { row in
            let parent = row.parentTable.map { "\($0)/\(row.parentID ?? "")" } ?? "-"
            let files = row.files.isEmpty ? "-" : row.files.map { "\($0.id):\($0.size)" }.joined(separator: ",")
            var values = "{"
            for (index, column) in row.columns.enumerated() {
                if index > 0 { values += "," }
                JSONText.Writer.writeString(column, into: &values)
                values += ":"
                try LostCommand.writeValue(row.values[index], into: &values)
            }
            values += "}"
            try context.record([row.table, row.id, row.deletedAt, row.change ?? "unpublished", row.deviceName ?? row.device, parent, files, values],
                               nulTerminated: zero)
        }
        return 0
    }

    /// `empty --all`, `empty --before TIME`.
    static func empty(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard invocation.arguments.count == 1 else { throw CovenError(.usage, "empty takes no argument but --all or --before TIME") }
        guard invocation.has("all") != invocation.has("before") else {
            throw CovenError(.usage, "empty takes --all or --before TIME (one of them)", hint: "coven trash empty --all")
        }
        let before = try invocation.time("before")
        let device = try context.openDevice()
        let emptied = try Trash(device).empty(before: before)
        if context.json { try context.printJSON(["emptied": emptied]) } else { context.report("emptied \(emptied.counted("row")) from the trash: the next 'coven gc' frees their bytes") }
        return 0
    }

    /// `retention`, `retention DURATION`.
    static func retention(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard invocation.arguments.count <= 2 else { throw CovenError(.usage, "retention takes one DURATION at most") }
        if invocation.has("all") || invocation.has("before") { throw CovenError(.usage, "--all and --before go with 'empty'") }
        if invocation.arguments.count == 2 {
            let text = invocation.arguments[1]
            guard let seconds = parseDuration(text) else {
                throw CovenError(.usage, "a retention window is a number with a unit (90d, 12h, 30m, 45s), not '\(text)'")
            }
            let device = try context.openDevice()
            try Trash(device).setRetention(seconds)
            if context.json { try context.printJSON(["retention": formatDuration(seconds), "seconds": seconds, "default": false]) } else { context.line(formatDuration(seconds)) }
            return 0
        }
        let device = try context.openDeviceReadOnly()
        let trash = Trash(device)
        let seconds = try trash.retention(), isSet = try trash.retentionIsSet()
        if context.json {
            try context.printJSON(["retention": formatDuration(seconds), "seconds": seconds, "default": !isSet])
        } else {
            context.line(formatDuration(seconds) + (isSet ? "" : " (default)"))
        }
        return 0
    }

    /// A duration: a whole number (0 or more) with a unit (d, h, m, s, w), or a bare number of days.
    static func parseDuration(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1]
        guard let last = text.last else { return nil }
        let (digits, unit) = units[last].map { (String(text.dropLast()), $0) } ?? (text, 86_400)
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let number = Int64(digits),
              number >= 0, number <= Int64.max / unit else { return nil }
        return number * unit
    }

    /// The largest unit that divides `seconds` (`30d`, `12h`, `90s`).
    static func formatDuration(_ seconds: Int64) -> String {
        for (unit, size) in [("d", Int64(86_400)), ("h", 3_600), ("m", 60)] where seconds % size == 0 { return "\(seconds / size)\(unit)" }
        return "\(seconds)s"
    }

    /// One trashed row as the JSON object `trash --json` prints, keys sorted as Foundation
    /// sorts them, written by hand (a row at a time, 100,000 of them under a second).
    static func jsonObject(_ row: TrashedRow, writer: JSONText.Writer, order: inout (columns: [String], positions: [Int])) throws -> String {
        var text = "{\"change\":"
        LostCommand.writeOptional(row.change, into: &text)
        text += ",\"deleted_at\":"
        JSONText.Writer.writeString(row.deletedAt, into: &text)
        text += ",\"deleted_by\":{\"device\":"
        JSONText.Writer.writeString(row.device, into: &text)
        text += ",\"member\":"
        LostCommand.writeOptional(row.member, into: &text)
        text += ",\"name\":"
        LostCommand.writeOptional(row.deviceName, into: &text)
        text += "},\"files\":["
        for (index, file) in row.files.enumerated() {
            if index > 0 { text += "," }
            text += "{\"id\":"
            JSONText.Writer.writeString(file.id, into: &text)
            text += ",\"size\":" + String(file.size) + "}"
        }
        text += "],\"id\":"
        JSONText.Writer.writeString(row.id, into: &text)
        text += ",\"parent\":"
        if let table = row.parentTable, let id = row.parentID {
            text += "{\"id\":"
            JSONText.Writer.writeString(id, into: &text)
            text += ",\"table\":"
            JSONText.Writer.writeString(table, into: &text)
            text += "}"
        } else {
            text += "null"
        }
        text += ",\"stamp\":"
        JSONText.Writer.writeString(row.stamp, into: &text)
        text += ",\"table\":"
        JSONText.Writer.writeString(row.table, into: &text)
        text += ",\"values\":{"
        // The columns in the order Foundation sorts keys, found once per list of columns.
        if order.columns != row.columns {
            let values = Dictionary(zip(row.columns, row.values), uniquingKeysWith: { first, _ in first })
            let sorted = try writer.order(of: values)
            order = (row.columns, sorted.compactMap { row.columns.firstIndex(of: $0) })
        }
        for (index, position) in order.positions.enumerated() {
            if index > 0 { text += "," }
            JSONText.Writer.writeString(row.columns[position], into: &text)
            text += ":"
            try LostCommand.writeValue(row.values[position], into: &text)
        }
        return text + "}}"
    }
}
