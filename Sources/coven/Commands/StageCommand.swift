import CovenKit
import Foundation

/// `coven stage`: stage app bytes, or prepare a person's original.
struct StageCommand: Command {
    static let name = "stage"
    static let abstract = "stage app bytes or prepare a person's original for a write"
    static let synopsis = [
        "(PATH | -) --namespace NS [--place cloud|device-only]",
        "--user PATH --namespace NS [--place cloud|device-only]",
        "--files-from FILE|- [-z] [--user] --namespace NS [--place cloud|device-only]",
    ]
    static let discussion = """
    With PATH or - (stdin), copies app bytes into coven's own copy beside the device, streamed \
    and hashed as they come, written and synced before the command returns. With --user, reads \
    a person's original once (its size, exact modification time, whole-file SHA-256 and a \
    SHA-256 of each 64 KiB chunk) and never copies, moves, changes or deletes it. Prints the \
    staged id, which 'coven write' puts in rows with coven_put_staged(ID) or \
    coven_put_user_file(ID). PATH must be a regular file (a FIFO or a device is refused at \
    once; stream it through stdin instead). A signal stops the staging and removes its \
    temporary file (exit 130).

    With --files-from, stages many files in one process: the paths are read from FILE or \
    stdin, one a line (-z: NUL-separated, for names holding newlines), app bytes copied, or \
    with --user people's originals prepared. Files are hashed in parallel a window at a time \
    (256 files or 256 MiB) and each window is recorded in one transaction; memory stays \
    bounded whatever the count. Prints one line per staged file, in input order: its id and \
    its path, tab-separated (-z: each NUL-ended; --json: one JSON object a line with id and \
    path, what 'coven write --each' binds as :id and :path). A path that fails (missing, \
    unreadable, not a regular file, changed while read) is reported on stderr, on a line of \
    its own, and the others are staged: the exit is then 10 (partial). A signal keeps what \
    was staged, says how many paths were (exit 130).
    """
    static let options = [
        OptionSpec("user", value: "[PATH]", help: "prepare the person's original at PATH (with --files-from: the originals listed) instead of copying bytes", completion: .file),
        OptionSpec("files-from", value: "FILE", help: "stage every file listed in FILE (- for stdin), one path a line", completion: .file),
        OptionSpec("null", short: "z", help: "the paths of --files-from are NUL-separated, and each printed field is NUL-ended"),
        OptionSpec("namespace", short: "n", value: "NS", help: "the declared namespace the file belongs to"),
        OptionSpec("place", value: "WHERE", help: "cloud (uploaded, the default) or device-only", choices: ["cloud", "device-only"]),
    ]
    static let arguments = [ArgumentSpec("PATH", help: "app bytes to stage, or - for stdin", optional: true, completion: .file)]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let namespace = invocation.value("namespace") else { throw CovenError(.usage, "missing --namespace NS") }
        let place = Place(rawValue: invocation.value("place") ?? "cloud") ?? .cloud
        if let list = invocation.value("files-from") {
            return try runBatch(list: list, namespace: namespace, place: place, invocation, context)
        }
        if invocation.has("null") { throw CovenError(.usage, "-z goes with --files-from") }
        let device = try context.openDevice()
        let staged: StagedFile
        if let user = invocation.value("user") {
            guard !user.isEmpty else { throw CovenError(.usage, "--user needs a PATH (or --files-from FILE for many)") }
            guard invocation.arguments.isEmpty else {
                throw CovenError(.usage, "give either --user PATH or PATH, not both")
            }
            let total = PathText.withCString(user) { path -> Int64? in
                var info = stat()
                return stat(path, &info) == 0 ? Int64(info.st_size) : nil
            }
            let progress = ProgressLine(context, label: "reading", total: total)
            defer { progress.finish() }
            staged = try Staging(device).prepareUserFile(path: user, namespace: namespace, place: place, wait: !context.noWait, stop: Stop.process, progress: progress.update)
        } else {
            guard let source = invocation.arguments.first else {
                throw CovenError(.usage, "missing PATH (or - for stdin, or --user PATH)")
            }
            let descriptor: Int32
            if source == "-" {
                descriptor = 0
            } else {
                // Non-blocking, so a FIFO with no writer is refused instead of waited on forever;
                // the same rule as --user: only a regular file (stdin is for streams).
                descriptor = PathText.withCString(source) { open($0, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
                guard descriptor >= 0 else { throw CovenError.posix("open", path: PathText.display(source)) }
                var info = stat()
                guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
                    close(descriptor)
                    throw CovenError(.io, "'\(PathText.display(source))' is not a regular file", hint: "stage a stream from stdin: coven stage - < SOURCE",
                                     details: ["path": PathText.display(source)])
                }
                _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
            }
            defer { if descriptor != 0 { close(descriptor) } }
            var info = stat()
            let total: Int64? = fstat(descriptor, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG ? Int64(info.st_size) : nil
            let progress = ProgressLine(context, label: "staging", total: total)
            defer { progress.finish() }
            staged = try Staging(device).stageAppBytes(from: descriptor, sourceName: source == "-" ? "stdin" : source, namespace: namespace, place: place, wait: !context.noWait, stop: Stop.process, progress: progress.update)
        }
        if context.json {
            var object: [String: Any] = [
                "id": staged.id, "kind": staged.kind.rawValue, "namespace": staged.namespace,
                "place": staged.place, "size": staged.size, "sha256": staged.contentHash,
            ]
            if let seconds = staged.modifiedSeconds, let nanos = staged.modifiedNanos {
                object["modified_seconds"] = seconds
                object["modified_nanos"] = nanos
            }
            try context.printJSON(object)
        } else {
            context.line(staged.id)
        }
        do {
            try context.out.flushChecked()
        } catch {
            // The id is lost: nothing could ever name the staged file, so it goes again.
            try? Staging(device).discardStaged(staged.id)
            throw error
        }
        return 0
    }

    // MARK: - Many files

    static func runBatch(list: String, namespace: String, place: Place, _ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        if let user = invocation.value("user"), !user.isEmpty {
            throw CovenError(.usage, "give --user without a PATH with --files-from: the paths come from the list")
        }
        guard invocation.arguments.isEmpty else { throw CovenError(.usage, "give either --files-from or PATH, not both") }
        let kind: FileKind = invocation.has("user") ? .user : .app
        let nul = invocation.has("null")
        let descriptor: Int32
        if list == "-" {
            descriptor = 0
        } else {
            descriptor = PathText.withCString(list) { open($0, O_RDONLY | O_CLOEXEC) }
            guard descriptor >= 0 else { throw CovenError.posix("open", path: PathText.display(list)) }
        }
        defer { if descriptor != 0 { close(descriptor) } }
        let device = try context.openDevice()
        let reader = PathListReader(descriptor: descriptor, name: list == "-" ? "stdin" : PathText.display(list), separator: nul ? 0 : UInt8(ascii: "\n"))
        let summary = try Staging(device).stageBatch(kind: kind, namespace: namespace, place: place, wait: !context.noWait, stop: Stop.process, next: reader.next, report: { outcome in
            let shown = PathText.display(outcome.path)
            switch outcome.result {
            case .success(let staged):
                if context.json {
                    // Written by hand, keys in the order JSONText sorts them: Foundation's
                    // serializer costs more than staging a small file.
                    var line = "{\"id\":" + JSONText.string(staged.id) + ",\"kind\":" + JSONText.string(staged.kind.rawValue)
                    if let seconds = staged.modifiedSeconds, let nanos = staged.modifiedNanos {
                        line += ",\"modified_nanos\":\(nanos),\"modified_seconds\":\(seconds)"
                    }
                    line += ",\"namespace\":" + JSONText.string(staged.namespace) + ",\"path\":" + JSONText.string(shown)
                        + ",\"place\":" + JSONText.string(staged.place) + ",\"sha256\":\"" + staged.contentHash + "\",\"size\":\(staged.size)}\n"
                    context.out.write(line)
                } else {
                    try context.record([staged.id, shown], nulTerminated: nul)
                }
                // A staged id that cannot be handed out could never be named: stop there (what
                // was printed before stays staged; this one goes again).
                do {
                    try context.out.check()
                } catch {
                    try? Staging(device).discardStaged(staged.id)
                    throw error
                }
            case .failure(let error):
                if context.json {
                    var object: [String: Any] = ["path": shown, "error": error.code.rawValue, "message": error.message]
                    if let cause = error.cause { object["cause"] = cause }
                    context.err.write(((try? JSONText.render(object)) ?? "{\"error\":\"internal\"}") + "\n")
                } else {
                    context.err.write("coven: failed: \(error.code.rawValue): \(error.message)\(error.cause.map { ": " + $0 } ?? "")\n")
                }
            }
        }, windowReported: {
            // Each window's lines go out as soon as it is recorded: the next command of a
            // pipeline starts on them, and a kill leaves printed exactly what was staged.
            try context.out.flushChecked()
        })
        try context.out.flushChecked()
        guard summary.failed == 0 else {
            let message = "\(summary.staged.counted("file")) staged, \(summary.failed) failed"
            if context.json {
                let object: [String: Any] = ["error": ErrorCode.partial.rawValue, "message": message, "staged": summary.staged, "failed": summary.failed,
                                             "exit_code": Int(ExitCodes.partial)]
                context.err.write(((try? JSONText.render(object)) ?? "{\"error\":\"partial\"}") + "\n")
            } else {
                context.err.write("coven: error: partial: \(message)\n")
            }
            return ExitCodes.partial
        }
        return 0
    }
}

/// Reads the paths of `--files-from`, one at a time, a block at a time: never the whole list
/// (`stage`'s paths, `get`'s file ids).
final class PathListReader {
    private let records: RecordReader

    init(descriptor: Int32, name: String, separator: UInt8, command: String = "stage") {
        records = RecordReader(descriptor: descriptor, name: name, separator: separator, command: command)
    }

    /// The next non-empty path, nil at the end of the list.
    func next() throws -> String? {
        while let bytes = try records.next() {
            if bytes.isEmpty { continue }
            return try path(bytes)
        }
        return nil
    }

    private func path(_ bytes: [UInt8]) throws -> String {
        if bytes.contains(0) {
            throw CovenError(.usage, "a path of the list holds a NUL byte", hint: "separate NUL-separated paths with -z")
        }
        return PathText.string(fromOSBytes: bytes)
    }
}
