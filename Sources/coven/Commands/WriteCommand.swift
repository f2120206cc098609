import CovenKit
import Foundation

/// `coven write`: one transaction of app SQL with coven's write functions.
struct WriteCommand: Command {
    static let name = "write"
    static let abstract = "run one transaction of app SQL that may put files in rows"
    static let synopsis = ["[SQL | -] [--param NAME=VALUE]...", "--each FILE|- SQL [--param NAME=VALUE]..."]
    static let discussion = """
    Runs the SQL (an argument, or stdin when it is - or absent) as one transaction, with coven's \
    SQL functions: coven_put_staged(STAGED), coven_put_user_file([NAMESPACE,] PREPARED [, PLACE]), \
    coven_existing_file(FILE), coven_stamp() and coven_uuid7(). Before it commits, every file \
    reference is checked (file_unknown, file_unreferenced, file_write_once, bound_file_too_large, \
    namespace_kind, device_only), every synced row it changed is stamped, and the write is \
    recorded for publishing. A failed write changes nothing; staged files stay staged. Prints \
    the ids of the files it made, one a line. A script on stdin runs a statement at a time as \
    it is read (still one transaction), so its length costs no memory.

    With --each, the SQL runs once per JSON object of FILE (or stdin), one object a line (what \
    'coven stage --files-from --json' prints), its keys bound as named parameters (:id, \
    :path, ...): text, numbers and null as they are, true and false as 1 and 0, arrays and \
    objects as JSON text. The lines are read one at a time and all run in one transaction: a \
    line that is not a JSON object, or whose run fails, refuses the whole write, and the \
    error names the line (its number in the `line` field under --json).

    Input from a pipe (or a terminal) is read to its end, into an unlinked file of the \
    device's temporary folder, before the write takes the device's lock: a coven command \
    writing into the pipe takes the lock between its own writes, so \
    'coven stage --json --files-from - | coven write --each - SQL' runs as a pipeline.
    """
    static let options = [
        OptionSpec("param", short: "p", value: "NAME=VALUE", help: "bind :NAME in the SQL to VALUE (text)", repeatable: true),
        OptionSpec("each", value: "FILE", help: "run the SQL once per JSON object of FILE (- for stdin), one a line, its keys bound as parameters", completion: .file),
    ]
    static let arguments = [ArgumentSpec("SQL", help: "the SQL to run, or - for stdin", optional: true)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let result: WriteResult
        let device: Device
        if let each = invocation.value("each") {
            guard let argument = invocation.arguments.first, argument != "-" else {
                throw CovenError(.usage, "--each takes the SQL as an argument", hint: "the lines of --each are its parameters; give the statement after them")
            }
            let (sql, parameters) = try SQLInput.read(invocation, context)
            _ = argument
            let descriptor: Int32
            if each == "-" {
                descriptor = 0
            } else {
                descriptor = PathText.withCString(each) { open($0, O_RDONLY | O_CLOEXEC) }
                guard descriptor >= 0 else { throw CovenError.posix("open", path: PathText.display(each)) }
            }
            defer { if descriptor != 0 { close(descriptor) } }
            device = try context.openDevice()
            let name = each == "-" ? "stdin" : PathText.display(each)
            // A pipe is read to its end before the write takes the device lock (the command
            // writing into it may take the lock between its writes: `coven stage --json ... |`).
            let input = try Spool.drained(descriptor, name: name, folder: device.paths.temporary)
            defer { if input.new { close(input.descriptor) } }
            let lines = PrefetchedLines(JSONLineReader(descriptor: input.descriptor, name: name, base: parameters))
            // Before the descriptors close (defers run last first).
            defer { lines.stop() }
            // The files it put are printed from the write's table a page at a time, not held.
            result = try device.writeEach(sql: sql, wait: !context.noWait, listsFiles: false, next: lines.next)
            try warnIfRemoved(device, context)
            try printStreamed(result, device, context)
            return 0
        } else if invocation.arguments.first ?? "-" == "-" {
            // A script on stdin runs a statement at a time as it is read.
            guard invocation.arguments.first == "-" || !context.stdinIsTerminal else {
                throw CovenError(.usage, "missing SQL", hint: "pass it as an argument, or - to read it from stdin")
            }
            let parameters = try SQLInput.parameters(invocation)
            device = try context.openDevice()
            // Read to its end before the write takes the device lock, as --each's input.
            let input = try Spool.drained(0, name: "stdin", folder: device.paths.temporary)
            defer { if input.new { close(input.descriptor) } }
            result = try device.writeScript(read: { buffer in
                while true {
                    let got = Foundation.read(input.descriptor, buffer.baseAddress, buffer.count)
                    if got >= 0 { return got }
                    if errno == EINTR { try Stop.process.check("write"); continue }
                    throw CovenError.posix("read", path: "stdin")
                }
            }, parameters: parameters, wait: !context.noWait)
        } else {
            let (sql, parameters) = try SQLInput.read(invocation, context)
            device = try context.openDevice()
            result = try device.write(sql: sql, parameters: parameters, wait: !context.noWait)
        }
        try warnIfRemoved(device, context)
        if context.json {
            try context.printJSON([
                "files": result.files,
                "staged": result.staged,
                "move": result.move.map { $0 as Any } ?? NSNull(),
                "rows": result.rows.map(SQLCommand.jsonObject),
            ])
        } else {
            result.files.forEach(context.line)
        }
        return 0
    }

    static func warnIfRemoved(_ device: Device, _ context: CommandContext) throws {
        if let removed = try StoreSync(device).removedAt() {
            context.note("warning: this device was removed from the store at \(removed): this write stays here and will never be published")
            context.note("hint: make a new device with 'coven join'")
        }
    }

    /// Prints what a write made with `listsFiles: false` made as ``run(_:_:)`` prints a
    /// result, the files read from the device a page at a time: the same text, and the same
    /// JSON but for the order of `staged`'s keys (the order the files were put, where a whole
    /// document has them sorted).
    static func printStreamed(_ result: WriteResult, _ device: Device, _ context: CommandContext) throws {
        guard context.json else {
            try device.forEachFilePut { file, _ in context.line(file) }
            return
        }
        // {"files":[...],"move":...,"rows":[...],"staged":{...}}: the keys in render's order.
        let writer = JSONText.Writer()
        var text = "{\"files\":["
        var first = true
        try device.forEachFilePut { file, _ in
            text += (first ? "" : ",") + JSONText.string(file)
            first = false
            if text.utf8.count >= 1 << 16 { context.out.write(text); text = "" }
        }
        text += "],\"move\":"
        try writer.write(result.move.map { $0 as Any } ?? NSNull(), into: &text)
        text += ",\"rows\":"
        try writer.write(result.rows.map(SQLCommand.jsonObject), into: &text)
        text += ",\"staged\":{"
        first = true
        try device.forEachFilePut { file, staged in
            guard let staged else { return }
            text += (first ? "" : ",") + JSONText.string(staged) + ":" + JSONText.string(file)
            first = false
            if text.utf8.count >= 1 << 16 { context.out.write(text); text = "" }
        }
        context.out.write(text + "}}\n")
    }
}

/// The objects of a ``JSONLineReader``, read and parsed a little ahead on a thread of its own, so
/// the write's core runs its statements while the next lines are parsed (parsing was a tenth
/// of a `write --each` of 10,000 staged files). At most ``depth`` parsed lines wait: the input
/// is still never held whole. A reading or parsing error comes in its place, after the lines
/// before it. Each side wakes the other only when it waits for it, and a full queue waits until
/// it is half empty: one wake-up a half queue, not one a line (a futex wake a line was a
/// twentieth of the write's thread). @unchecked: its state is read and written under
/// `condition`; the reader is used by the thread alone.
final class PrefetchedLines: @unchecked Sendable {
    typealias Line = (line: Int, parameters: [String: SQLValue])
    static let depth = 256

    private let condition = NSCondition()
    private var waiting: [Result<Line?, Error>] = []
    private var head = 0
    private var stopping = false
    private var done = false
    /// Whether the reading thread waits for room, and the taker for a line.
    private var producerWaits = false
    private var consumerWaits = false

    init(_ reader: JSONLineReader) {
        // The thread alone uses the reader from now on.
        nonisolated(unsafe) let reader = reader
        let thread = Thread { [self] in
            produce(reader)
            condition.lock()
            done = true
            condition.broadcast()
            condition.unlock()
        }
        thread.name = "coven-write-lines"
        thread.start()
    }

    private func produce(_ reader: JSONLineReader) {
        while true {
            let item: Result<Line?, Error>
            do { item = .success(try reader.next()) } catch { item = .failure(error) }
            condition.lock()
            if waiting.count - head >= Self.depth {
                producerWaits = true
                while waiting.count - head > Self.depth / 2 && !stopping { condition.wait() }
                producerWaits = false
            }
            if stopping {
                condition.unlock()
                return
            }
            waiting.append(item)
            if consumerWaits { condition.broadcast() }
            condition.unlock()
            if case .success(let line) = item, line != nil { continue }
            return
        }
    }

    /// The next line's parameters, as ``JSONLineReader/next()`` gives them; nil at the end.
    func next() throws -> Line? {
        condition.lock()
        defer { condition.unlock() }
        while head == waiting.count {
            if done { return nil }
            consumerWaits = true
            condition.wait()
            consumerWaits = false
        }
        let item = waiting[head]
        head += 1
        if head >= Self.depth {
            waiting.removeFirst(head)
            head = 0
        }
        if producerWaits && waiting.count - head <= Self.depth / 2 { condition.broadcast() }
        return try item.get()
    }

    /// Stops the reading thread and waits until it is done with the reader.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while !done { condition.wait() }
        condition.unlock()
    }
}

/// Reads the JSON objects of `write --each`, one a line, a block at a time: never the whole input.
final class JSONLineReader {
    private let name: String
    private let base: [String: SQLValue]
    private let records: RecordReader
    private var line = 0

    init(descriptor: Int32, name: String, base: [String: SQLValue]) {
        self.name = name
        self.base = base
        records = RecordReader(descriptor: descriptor, name: name, separator: UInt8(ascii: "\n"), command: "write")
    }

    /// The next object's keys as parameters (over the --param ones), with its line; nil at the end.
    func next() throws -> (line: Int, parameters: [String: SQLValue])? {
        while let bytes = try records.next() {
            line += 1
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            let object: Any
            do {
                object = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
            } catch {
                throw CovenError(.usage, "line \(line) of \(name) is not JSON", hint: "give one JSON object a line, as 'coven stage --files-from --json' prints", details: ["line": String(line)])
            }
            guard let dictionary = object as? [String: Any] else {
                throw CovenError(.usage, "line \(line) of \(name) is not a JSON object", hint: "give one JSON object a line, as 'coven stage --files-from --json' prints", details: ["line": String(line)])
            }
            var parameters = base
            for (key, value) in dictionary.sorted(by: { $0.key < $1.key }) {
                // SQLite's text stops at a NUL: a value holding one would be cut short, silently.
                if key.utf8.contains(0) || ((value as? String)?.utf8.contains(0) ?? false) {
                    throw CovenError(.usage, "line \(line) of \(name): the value of '\(key.replacingOccurrences(of: "\0", with: "\\u0000"))' holds a NUL character (\\u0000), which a text value cannot carry",
                                     hint: "nothing was written; pass such bytes as hex text", details: ["line": String(line), "key": key])
                }
                parameters[key] = Self.value(value)
            }
            return (line, parameters)
        }
        return nil
    }

    static func value(_ value: Any) -> SQLValue {
        switch value {
        case is NSNull: return .null
        case let text as String: return .text(text)
        case let number as NSNumber:
            let type = String(cString: number.objCType)
            if type == "c" || type == "B" { return .integer(number.boolValue ? 1 : 0) }
            if type == "d" || type == "f" { return .real(number.doubleValue) }
            return .integer(number.int64Value)
        default:
            guard let data = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]) else { return .null }
            return .text(String(decoding: data, as: UTF8.self))
        }
    }
}
