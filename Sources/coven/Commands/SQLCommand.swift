import CovenKit
import Foundation

/// `coven sql`: read-only SQL over the app's tables and coven's views.
struct SQLCommand: Command {
    static let name = "sql"
    static let abstract = "run read-only SQL over the app tables and coven's views"
    static let synopsis = ["[SQL | -] [--param NAME=VALUE]... [-z]", "--watch SQL [--until-empty] [--param NAME=VALUE]... [-z]"]
    static let discussion = """
    Prints each row on a line, its values separated by tabs (NULL as nothing, a newline, tab \
    or backslash in a value as \\n, \\t, \\\\, a BLOB such as a path as its text with bytes \
    that are not UTF-8 as \\xNN); with -z each value ends with NUL, printed as it is (a \
    row is as many fields as the query has columns; a value holding a NUL byte is refused: \
    use --json); with --json one array of objects (a BLOB as lowercase \
    hex). Reads \
    coven_files, coven_user_files, coven_uploads, coven_sending, coven_moves, \
    coven_upload_pause, coven_network and coven_devices, with the functions \
    coven_file_device(coordinates), coven_path_text(path), coven_device_id() and \
    coven_kept(table, id) (1 when the row would leave this device at the next sync, 0 when a \
    gate keeps it here). Never changes anything and never \
    waits for the device lock.

    With --watch, prints the result once, then again each time it changes, woken by another \
    process committing to the device (a file watch on the database and its log, confirmed by \
    SQLite's data_version: never a busy poll): each result is followed by an empty line (-z: \
    by one more NUL; --json: each result is one JSON array on a line of its own). It runs \
    until a signal (exit 130) or, with --until-empty, until the query returns no rows (exit \
    0): a script waits for the upload queue to drain with \
    coven sql --watch --until-empty "SELECT * FROM coven_uploads".
    """
    static let options = [
        OptionSpec("param", short: "p", value: "NAME=VALUE", help: "bind :NAME in the SQL to VALUE (text)", repeatable: true),
        CommandContext.nulTerminatedOption,
        OptionSpec("watch", help: "print the result again each time it changes, until a signal"),
        OptionSpec("until-empty", help: "with --watch: end once the result has no rows"),
    ]
    static let arguments = [ArgumentSpec("SQL", help: "the query, or - for stdin", optional: true)]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let (sql, parameters) = try SQLInput.read(invocation, context)
        let device = try context.openDeviceReadOnly()
        let zero = invocation.has("null-terminated")
        if invocation.has("watch") {
            return try watch(context, device: device, untilEmpty: invocation.has("until-empty"), zero: zero) { rows in
                try readOnly { try device.database.executeReadOnlyScript(sql, parameters: parameters) { rows.append($0) } }
            }
        }
        if invocation.has("until-empty") { throw CovenError(.usage, "--until-empty goes with --watch") }
        var objects: [[String: Any]] = []
        try readOnly {
            try device.database.executeReadOnlyScript(sql, parameters: parameters) { row in
                if context.json {
                    objects.append(jsonObject(row))
                } else {
                    try context.record(bytes: fields(row, zero: zero), nulTerminated: zero)
                    try context.out.check()
                }
            }
        }
        if context.json { try context.printJSON(objects) }
        return 0
    }

    private static func readOnly(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as CovenError where error.code == .sql && (error.cause ?? error.message).contains("readonly") {
            // The connection is read-only (and query_only): SQLite says "attempt to write a
            // readonly database" for any write, temporary tables included.
            throw CovenError(.sql, "coven sql only reads", hint: "change rows with 'coven write'", cause: error.cause ?? error.message)
        }
    }

    /// `--watch`: prints the rows `query` gives as a run without it would, then again each time
    /// they change, until a signal or, with `untilEmpty`, no rows.
    static func watch(_ context: CommandContext, device: Device, untilEmpty: Bool, zero: Bool, query: (inout [Row]) throws -> Void) throws -> Int32 {
        try context.watch(device, untilEmpty: untilEmpty, nulTerminated: zero) {
            var rows: [Row] = []
            try query(&rows)
            if context.json { return (Array((try JSONText.render(rows.map(jsonObject)) + "\n").utf8), rows.isEmpty) }
            let listing = try rows.flatMap { try CommandContext.recordBytes(fields($0, zero: zero), nulTerminated: zero) }
            return (listing, rows.isEmpty)
        }
    }

    /// A row's fields as printed: escaped text on a line, or under `-z` each value as it is
    /// (a BLOB's own bytes, never `\xNN`).
    static func fields(_ row: Row, zero: Bool) -> [[UInt8]] {
        guard zero else { return row.values.map { Array(escapedText($0).utf8) } }
        return row.values.map { value in
            if case .blob(let bytes) = value { return bytes }
            return Array(text(value).utf8)
        }
    }

    static func text(_ value: SQLValue) -> String {
        switch value {
        case .null: return ""
        case .integer(let v): return String(v)
        case .real(let v): return String(v)
        case .text(let v): return v
        case .blob(let v): return PathText.text(v)
        }
    }

    /// A value's text for a line of text output: a newline, a tab and a backslash in it become
    /// `\n`, `\t` and `\\`, so that a row stays one line and its values stay apart (a BLOB's
    /// bytes that are not UTF-8 then still read `\xNN`, never to be taken for a backslash).
    static func escapedText(_ value: SQLValue) -> String {
        switch value {
        case .text(let v):
            guard v.contains(where: { $0 == "\n" || $0 == "\t" || $0 == "\\" || $0 == "\r\n" }) else { return v }
            return String(decoding: escaped(Array(v.utf8)), as: UTF8.self)
        case .blob(let v): return PathText.text(escaped(v))
        default: return text(value)
        }
    }

    /// The bytes with every newline, tab and backslash written as its two-character escape
    /// (all three are ASCII, so no UTF-8 sequence is split).
    static func escaped(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\n"): out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case UInt8(ascii: "\t"): out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            default: out.append(byte)
            }
        }
        return out
    }

    static func jsonObject(_ row: Row) -> [String: Any] {
        var object: [String: Any] = [:]
        for (name, value) in zip(row.columns, row.values) {
            switch value {
            case .null: object[name] = NSNull()
            case .integer(let v): object[name] = v
            // JSON has no infinity (SQLite has, for 1e999): null, as for any value JSON lacks.
            case .real(let v): object[name] = v.isFinite ? v : NSNull()
            case .text(let v): object[name] = v
            case .blob(let v): object[name] = v.hex
            }
        }
        return object
    }
}
