import CovenKit
import Foundation

// MARK: - The model every command declares

/// How a shell completes an option's value or an argument.
enum Completion: String, Codable, Sendable {
    case none
    case file
    case directory
    /// A file id of this device (completed by calling `coven sql`).
    case fileID = "file-id"
    /// One of a fixed set of words, given in ``OptionSpec/choices``.
    case choice
}

/// One option of a command (`--place VALUE`, `-z`).
struct OptionSpec: Codable, Sendable {
    /// The long name without dashes (`place`).
    var long: String
    /// The one-letter short name, if any.
    var short: String?
    /// The value's placeholder (`WHERE`), or nil for a flag.
    var value: String?
    /// One line of help.
    var help: String
    /// Whether the option may be given more than once (`--param`).
    var repeatable: Bool = false
    /// How to complete the value.
    var completion: Completion = .none
    /// The allowed values when ``completion`` is `.choice`.
    var choices: [String] = []

    init(_ long: String, short: String? = nil, value: String? = nil, help: String,
         repeatable: Bool = false, completion: Completion = .none, choices: [String] = []) {
        self.long = long
        self.short = short
        self.value = value
        self.help = help
        self.repeatable = repeatable
        self.completion = choices.isEmpty ? completion : .choice
        self.choices = choices
    }
}

/// One positional argument.
struct ArgumentSpec: Codable, Sendable {
    /// The placeholder (`FILE`).
    var name: String
    /// One line of help.
    var help: String
    /// Whether it may be left out.
    var optional: Bool = false
    /// Whether it may be given more than once (`FILE...`).
    var repeating: Bool = false
    /// How to complete it.
    var completion: Completion = .none
    /// The allowed values when ``completion`` is `.choice`.
    var choices: [String] = []

    init(_ name: String, help: String, optional: Bool = false, repeating: Bool = false,
         completion: Completion = .none, choices: [String] = []) {
        self.name = name
        self.help = help
        self.optional = optional
        self.repeating = repeating
        self.completion = choices.isEmpty ? completion : .choice
        self.choices = choices
    }
}

/// Whether a command's output is a contract for scripts (plumbing) or for people (porcelain).
enum CommandCategory: String, Codable, Sendable {
    case plumbing
    case porcelain
}

/// A subcommand: one type per file in `Commands/`, listed once in ``CommandRegistry/all``.
///
/// `run` parses nothing itself: the registry's parser hands it an ``Invocation`` checked against
/// ``options`` and ``arguments``. It calls CovenKit and renders text or JSON through the context.
protocol Command: Sendable {
    /// The subcommand word (`stage`, `upload-worker`).
    static var name: String { get }
    /// One line saying what it does, lowercase, no final period.
    static var abstract: String { get }
    /// The usage lines after `coven NAME` (without it); several for several forms.
    static var synopsis: [String] { get }
    /// A paragraph or more for `--help` and the docs page's DESCRIPTION. Paragraphs are
    /// separated by a blank line and wrapped to 80 columns by `--help`; a paragraph whose first
    /// line starts with a space (an example) is printed as written.
    static var discussion: String { get }
    /// The command's own options (the global ones are added by the registry).
    static var options: [OptionSpec] { get }
    /// Its positional arguments.
    static var arguments: [ArgumentSpec] { get }
    /// Whether it changes the device (and so takes the device lock).
    static var mutates: Bool { get }
    /// Plumbing or porcelain.
    static var category: CommandCategory { get }
    /// Whether the command polls ``Stop/process`` while it works (a read, a staging, an upload
    /// run): the first SIGINT, SIGTERM or SIGHUP asks it to stop, and it reports `interrupted`
    /// once it has cleaned up. Any other command is ended by the first signal at once, with
    /// the same message and status (``Stop/installSignalHandlers(cooperative:message:)``).
    static var pollsStop: Bool { get }
    /// Runs the command; returns the exit status (0 for done).
    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32
}

extension Command {
    static var discussion: String { "" }
    static var arguments: [ArgumentSpec] { [] }
    static var category: CommandCategory { .plumbing }
    static var pollsStop: Bool { false }
}

// MARK: - A parsed command line

/// The options and arguments the parser read for one command.
struct Invocation {
    /// Every option given, by long name, with its values in order (flags have one empty value
    /// per occurrence).
    var options: [String: [String]] = [:]
    /// The positional arguments, in order.
    var arguments: [String] = []

    /// Whether a flag or option was given.
    func has(_ long: String) -> Bool { options[long] != nil }

    /// The last value of an option.
    func value(_ long: String) -> String? { options[long]?.last }

    /// Every value of a repeatable option.
    func values(_ long: String) -> [String] { options[long] ?? [] }

    /// An option's value as an integer, or a usage error naming it.
    /// The ISO 8601 date or time an option holds (`--since`, `--before`); nil when not given.
    ///
    /// - Throws: `.usage` for anything else.
    func time(_ long: String) throws -> Date? {
        guard let text = value(long) else { return nil }
        guard let time = LostCommand.parseTime(text) else {
            throw CovenError(.usage, "option '--\(long)' takes an ISO 8601 date or time (2026-11-01, 2026-11-01T12:00:00Z), not '\(text)'")
        }
        return time
    }

    func integer(_ long: String) throws -> Int64? {
        guard let text = value(long) else { return nil }
        guard let number = Int64(text) else {
            throw CovenError(.usage, "option '--\(long)' takes a whole number, not '\(text)'")
        }
        return number
    }
}

// MARK: - What a running command talks to

/// The environment a command runs in: global options, output streams, terminal facts.
final class CommandContext {
    /// `--db` or `COVEN_DB` or the default path.
    let databasePath: String
    /// `--json`: print data and errors as JSON.
    let json: Bool
    /// `--quiet`: print nothing but data and errors.
    let quiet: Bool
    /// `--no-wait`: fail with `busy` instead of waiting for the device lock.
    let noWait: Bool
    /// The process environment.
    let environment: [String: String]
    /// Where data goes.
    let out: OutputStream
    /// Where messages, progress and errors go.
    let err: OutputStream

    init(databasePath: String, json: Bool, quiet: Bool, noWait: Bool, environment: [String: String],
         out: OutputStream, err: OutputStream) {
        self.databasePath = databasePath
        self.json = json
        self.quiet = quiet
        self.noWait = noWait
        self.environment = environment
        self.out = out
        self.err = err
    }

    /// Whether stdin is a terminal (nothing interactive happens when it is not).
    var stdinIsTerminal: Bool { isatty(0) == 1 }

    /// Whether progress bars may be drawn: stderr is a terminal and `--quiet`/`--json` are off.
    var showsProgress: Bool { isatty(2) == 1 && !quiet && !json }

    /// Whether colour may be used (`NO_COLOR` unset and stderr a terminal).
    var usesColor: Bool { environment["NO_COLOR"] == nil && isatty(2) == 1 }

    /// Prints one line of data on stdout.
    func line(_ text: String) { out.write(text + "\n") }

    /// Prints a value as one JSON document on stdout.
    func printJSON(_ value: Any) throws {
        out.write(try JSONText.render(value) + "\n")
    }

    /// Prints one record of a list: its fields separated by tabs and ended by a newline (the
    /// caller escapes what a text field could hold), or under `-z` each field, as it is, ended
    /// by a NUL. A list command's records have the fixed number of fields its page gives, so a
    /// reader that takes that many NUL-ended fields a record never mistakes one field for two,
    /// whatever tab or newline a value holds (and a one-field list reads with `xargs -0`).
    ///
    /// - Throws: `.usage` under `-z` for a field holding a NUL byte, which NUL framing cannot
    ///   carry (`--json` can).
    func record(_ fields: [String], nulTerminated: Bool) throws {
        out.write(try Self.recordText(fields, nulTerminated: nulTerminated))
    }

    /// The text ``record(_:nulTerminated:)`` prints, for a listing built whole (`--watch`).
    static func recordText(_ fields: [String], nulTerminated: Bool) throws -> String {
        String(decoding: try recordBytes(fields.map { Array($0.utf8) }, nulTerminated: nulTerminated), as: UTF8.self)
    }

    /// Prints one record whose fields are bytes, as ``record(_:nulTerminated:)`` prints text:
    /// a BLOB, or a path that is not UTF-8, goes out as the bytes it is (paths are bytes end to
    /// end: what is printed names the file).
    func record(bytes fields: [[UInt8]], nulTerminated: Bool) throws {
        out.write(try Self.recordBytes(fields, nulTerminated: nulTerminated))
    }

    /// The bytes of one record: fields joined by tabs and ended by a newline, or each ended by
    /// a NUL.
    ///
    /// - Throws: `.usage` under `-z` for a field holding a NUL byte.
    static func recordBytes(_ fields: [[UInt8]], nulTerminated: Bool) throws -> [UInt8] {
        var bytes: [UInt8] = []
        for (index, field) in fields.enumerated() {
            if nulTerminated {
                guard !field.contains(0) else {
                    throw CovenError(.usage, "a value holds a NUL byte, which -z cannot print", hint: "print it with --json")
                }
                bytes += field
                bytes.append(0)
            } else {
                if index > 0 { bytes.append(UInt8(ascii: "\t")) }
                bytes += field
            }
        }
        if !nulTerminated { bytes.append(UInt8(ascii: "\n")) }
        return bytes
    }

    /// `--watch` of a listing: prints what `render` gives (its text, and whether the listing is
    /// empty), then again each time it changes, woken by another process committing to the
    /// device (``DatabaseWatch``: never a busy poll). Each listing is followed by an empty line
    /// (under `-z` by one more NUL; `--json` text is one line already). Ends on a signal or,
    /// with `untilEmpty`, once the listing is empty (0).
    func watch(_ device: Device, untilEmpty: Bool, nulTerminated: Bool, render: () throws -> (text: String, empty: Bool)) throws -> Int32 {
        try watch(device, untilEmpty: untilEmpty, nulTerminated: nulTerminated) {
            let (text, empty) = try render()
            return (Array(text.utf8), empty)
        }
    }

    /// ``watch(_:untilEmpty:nulTerminated:render:)`` of a listing rendered as bytes (`sql -z`
    /// of BLOBs).
    func watch(_ device: Device, untilEmpty: Bool, nulTerminated: Bool, render: () throws -> (bytes: [UInt8], empty: Bool)) throws -> Int32 {
        let watch = try DatabaseWatch(device)
        var last: [UInt8]?
        while true {
            let (text, empty) = try render()
            let shown = json ? text : text + [nulTerminated ? 0 : UInt8(ascii: "\n")]
            if shown != last {
                out.write(shown)
                try out.flushChecked()
                last = shown
            }
            if untilEmpty && empty { return 0 }
            try watch.next(stop: Stop.process)
        }
    }

    /// The `-z` option of a list command.
    static let nulTerminatedOption = OptionSpec("null-terminated", short: "z", help: "end each field with NUL instead of a tab or newline")

    /// Prints one line of a command's report of what it did on stdout (a summary of `sync`,
    /// `gc`'s deletes, the key `snapshot` stored), unless `--quiet`: a cron line run with
    /// `-q` prints nothing when it succeeds. Data a command is asked for goes through
    /// ``line(_:)``.
    func report(_ text: String) {
        guard !quiet else { return }
        line(text)
    }

    /// Prints a message for people on stderr, unless `--quiet`.
    func note(_ text: String) {
        guard !quiet else { return }
        err.write("coven: " + text + "\n")
    }
}

/// A byte sink over a file descriptor, buffered; flushed by ``flush()`` and at exit.
///
/// Every write is checked. A reader that went away (EPIPE: `coven cat FILE | head`) ends the
/// process quietly with status 141, as `cat` does. Any other failure (a full disk, an I/O
/// error, a stream that was closed when coven started) is kept: later writes are dropped and
/// ``check()`` throws it, so the command fails with its exit code instead of losing output.
final class OutputStream {
    private let descriptor: Int32
    private var buffer: [UInt8] = []
    private let limit: Int
    /// The errno of the first failed write, if one failed.
    private(set) var failure: Int32?

    /// - Parameter closed: the descriptor was closed when coven started (`>&-`); main put
    ///   /dev/null there so nothing else takes its number, and every write to it fails.
    init(descriptor: Int32, bufferSize: Int = 64 * 1024, closed: Bool = false) {
        self.descriptor = descriptor
        self.limit = bufferSize
        buffer.reserveCapacity(bufferSize)
        if closed { failure = EBADF }
    }

    func write(_ text: String) { write(Array(text.utf8)) }

    func write(_ bytes: [UInt8]) {
        guard failure == nil else { return }
        buffer.append(contentsOf: bytes)
        if buffer.count >= limit { flush() }
    }

    /// Throws the first failed write as a ``CovenError``: `.noRoom` for a full disk, `.io`
    /// otherwise (EBADF for a closed stream).
    func check() throws {
        guard let failure else { return }
        if failure == EINTR { try Stop.process.check("writing to \(descriptor == 1 ? "stdout" : "stderr")") }
        let name = descriptor == 1 ? "stdout" : descriptor == 2 ? "stderr" : "descriptor \(descriptor)"
        let cause = String(cString: strerror(failure))
        switch failure {
        case ENOSPC, EDQUOT:
            throw CovenError(.noRoom, "cannot write to \(name)", cause: cause)
        case EBADF:
            throw CovenError(.io, "cannot write to \(name): it is closed", hint: "give the command somewhere to write, such as > FILE or > /dev/null", cause: cause)
        default:
            throw CovenError(.io, "cannot write to \(name)", cause: cause)
        }
    }

    /// Flushes, then throws a failed write (see ``check()``).
    func flushChecked() throws {
        flush()
        try check()
    }

    func write(_ bytes: UnsafeRawBufferPointer) {
        guard failure == nil else { return }
        if buffer.count + bytes.count >= limit {
            flush()
            writeAll(bytes)
        } else {
            buffer.append(contentsOf: bytes)
        }
    }

    func flush() {
        guard !buffer.isEmpty else { return }
        buffer.withUnsafeBytes { writeAll($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) {
        guard failure == nil else { return }
        var offset = 0
        while offset < bytes.count, let base = bytes.baseAddress {
            // A write its reader does not take returns part way (or EINTR) when a signal lands:
            // once the signal asked the command to stop, it is not begun again. (A summary a
            // stopped command prints, as fetch-kept's, still goes out.)
            if offset > 0 && descriptor != 2 && Stop.signalled {
                failure = EINTR
                return
            }
            let written = Foundation.write(descriptor, base + offset, bytes.count - offset)
            if written < 0 {
                // A signal that asks the command to stop ends a write its reader does not take.
                if errno == EINTR && Stop.signalled {
                    failure = EINTR
                    return
                }
                if errno == EINTR { continue }
                // EPIPE: the reader went away (`coven cat | head`); stop quietly like cat does.
                if errno == EPIPE { exit(141) }
                failure = errno
                return
            }
            if written == 0 {
                failure = EIO
                return
            }
            offset += written
        }
    }
}

/// JSON rendering with stable key order, for output that scripts and golden tests compare.
enum JSONText {
    static func render(_ value: Any) throws -> String {
        let data = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self)
    }

    /// `text` as a JSON string, quoted and escaped as ``render(_:)`` writes it: for a line
    /// printed per item of a long run, where Foundation's serializer would cost the most.
    static func string(_ text: String) -> String {
        var out = ""
        Writer.writeString(text, into: &out)
        return out
    }

    /// The text ``render(_:)`` gives, written by a writer of its own for the values commands
    /// print (dictionaries, arrays, strings, integers, booleans, null; anything else through
    /// Foundation), for long lists: Foundation's sorted keys compare every pair of keys through
    /// a locale, ten seconds for 10,000 lost values. The key order is Foundation's, found once
    /// per set of keys.
    final class Writer {
        private var orders: [[String]: [String]] = [:]

        func render(_ value: Any) throws -> String {
            var text = ""
            try write(value, into: &text)
            return text
        }

        func write(_ value: Any, into text: inout String) throws {
            switch value {
            case let string as String:
                Self.writeString(string, into: &text)
            case let dictionary as [String: Any]:
                text += "{"
                for (index, key) in try order(of: dictionary).enumerated() {
                    if index > 0 { text += "," }
                    Self.writeString(key, into: &text)
                    text += ":"
                    try write(dictionary[key] as Any, into: &text)
                }
                text += "}"
            case let array as [Any]:
                text += "["
                for (index, element) in array.enumerated() {
                    if index > 0 { text += "," }
                    try write(element, into: &text)
                }
                text += "]"
            case is NSNull:
                text += "null"
            case let flag as Bool:
                text += flag ? "true" : "false"
            case let number as Int:
                text += String(number)
            case let number as Int64:
                text += String(number)
            default:
                text += try JSONText.render(value)
            }
        }

        /// The keys of `dictionary` in Foundation's sorted order: that of a dictionary of the
        /// same keys rendered by Foundation, read back from its text.
        func order<Value>(of dictionary: [String: Value]) throws -> [String] {
            let keys = dictionary.keys.sorted()
            if let known = orders[keys] { return known }
            let rendered = try JSONText.render(Dictionary(uniqueKeysWithValues: keys.map { ($0, 0) }))
            var order: [String] = []
            var utf8 = Substring(rendered).utf8.dropFirst()  // "{"
            while utf8.first == UInt8(ascii: "\"") {
                // A key's JSON string: up to the first quote not escaped.
                var end = utf8.index(after: utf8.startIndex)
                var escaped = false
                while end < utf8.endIndex {
                    let byte = utf8[end]
                    if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { break }
                    end = utf8.index(after: end)
                }
                let token = Data(utf8[utf8.startIndex...end])
                guard let key = try JSONSerialization.jsonObject(with: token, options: [.fragmentsAllowed]) as? String else {
                    throw CovenError(.internal, "cannot read back a rendered JSON key")
                }
                order.append(key)
                utf8 = utf8[utf8.index(after: end)...].drop { $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: "}") }.dropFirst()
            }
            guard order.count == keys.count else { throw CovenError(.internal, "cannot read back the order of rendered JSON keys") }
            orders[keys] = order
            return order
        }

        /// A JSON string as Foundation writes it (slashes not escaped).
        static func writeString(_ string: String, into text: inout String) {
            text += "\""
            // Most strings need no escape: appended whole.
            guard string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
                text += string
                text += "\""
                return
            }
            for scalar in string.unicodeScalars {
                switch scalar {
                case "\"": text += "\\\""
                case "\\": text += "\\\\"
                case "\u{8}": text += "\\b"
                case "\u{c}": text += "\\f"
                case "\n": text += "\\n"
                case "\r": text += "\\r"
                case "\t": text += "\\t"
                case "\u{0}"..."\u{f}": text += "\\u000" + String(scalar.value, radix: 16)
                case "\u{10}"..."\u{1f}": text += "\\u00" + String(scalar.value, radix: 16)
                default: text.unicodeScalars.append(scalar)
                }
            }
            text += "\""
        }
    }
}
