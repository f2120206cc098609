import CovenKit
import Foundation

/// `coven get`: make sure whole files are held; print each held copy's path.
struct GetCommand: Command {
    static let name = "get"
    static let abstract = "make sure whole files are held on this device and print their paths"
    static let synopsis = ["FILE...", "--files-from FILE|- [-z]"]
    static let discussion = """
    Prints the path of the held copy: the person's original or coven's own copy while the file \
    is on this device only, or the complete file in the cache, always bytes checked since they \
    were last written: coven's copy against its chunk hashes, a cached file written since its \
    last check read through with every chunk checked (any that fails fetched again). A file not held whole is fetched \
    first (a partial resumes with its missing chunks) and checked against its record's hash; a \
    file larger than the cache budget is still fetched. A file a read brought into the cache \
    whole ('coven cat' does not wait for the disk) is checked chunk by chunk, any chunk that \
    fails fetched again, and synced to the disk before its path is printed. The copy in the cache may be trimmed \
    later unless the file is kept ('coven pin'). On a full disk the cached files read longest \
    ago (never kept ones) give way first; fails with no_room, before fetching, when even then \
    the disk has no room for it. Never waits for the device lock.

    Several FILEs, or --files-from FILE (- for stdin; one id a line, or NUL-separated with -z), \
    hold many files in one run, paid per batch as fetch-kept: eight fetched at once, a batch of \
    them synced at once and recorded in one transaction before their lines are printed, one line \
    per file in the order given (with -z each path ended by NUL, and a failed file an empty field). A file that cannot be held is reported on stderr on a line \
    of its own ('coven: failed: CODE: message') and the others are held; when any failed, a last \
    line 'coven: error: partial: N files held, M failed' ends the run with status 10.
    """
    static let options: [OptionSpec] = [
        OptionSpec("files-from", value: "FILE", help: "hold every file whose id FILE lists (- for stdin), one id a line", completion: .file),
        OptionSpec("null", short: "z", help: "the ids of --files-from are NUL-separated, and each printed path is NUL-ended"),
    ]
    static let arguments = [ArgumentSpec("FILE", help: "the file's id", optional: true, repeating: true, completion: .fileID)]
    static let mutates = false
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let list = invocation.value("files-from")
        if list != nil, !invocation.arguments.isEmpty { throw CovenError(.usage, "give either --files-from or FILE..., not both") }
        if list == nil, invocation.has("null") { throw CovenError(.usage, "-z goes with --files-from") }
        if list == nil, invocation.arguments.count == 1 {
            let id = invocation.arguments[0]
            let device = try context.openDevice()
            let (path, report) = try Reader(device).holdFile(id, stop: Stop.process)
            if context.json {
                try context.printJSON(object(id, path: path, report: report))
            } else {
                try context.record(bytes: [PathText.osBytes(path)], nulTerminated: false)
            }
            return 0
        }
        guard list != nil || !invocation.arguments.isEmpty else { throw CovenError(.usage, "missing FILE") }
        let nul = invocation.has("null")
        var descriptor: Int32 = -1
        if let list {
            if list == "-" {
                descriptor = 0
            } else {
                descriptor = PathText.withCString(list) { open($0, O_RDONLY | O_CLOEXEC) }
                guard descriptor >= 0 else { throw CovenError.posix("open", path: PathText.display(list)) }
            }
        }
        defer { if descriptor > 0 { close(descriptor) } }
        let device = try context.openDevice()
        let next: () throws -> String?
        if let list {
            let reader = PathListReader(descriptor: descriptor, name: list == "-" ? "stdin" : PathText.display(list),
                                        separator: nul ? 0 : UInt8(ascii: "\n"), command: "get")
            next = reader.next
        } else {
            var ids = invocation.arguments.makeIterator()
            next = { ids.next() }
        }
        let summary = try ManyHolds(device: device).hold(stop: Stop.process, next: next) { outcome in
            switch outcome.result {
            case .success(let held):
                if context.json {
                    context.out.write(try JSONText.render(object(outcome.file, path: held.path, report: held.report)) + "\n")
                } else {
                    try context.record(bytes: [PathText.osBytes(held.path)], nulTerminated: nul)
                }
            case .failure(let error):
                // Under -z the Nth field answers the Nth id: a failed one leaves an empty field.
                if nul, !context.json { try context.record(bytes: [[]], nulTerminated: true) }
                if context.json {
                    var object: [String: Any] = ["file": outcome.file, "error": error.code.rawValue, "message": error.message]
                    if let cause = error.cause { object["cause"] = cause }
                    context.err.write(((try? JSONText.render(object)) ?? "{\"error\":\"internal\"}") + "\n")
                } else {
                    context.err.write("coven: failed: \(error.code.rawValue): \(error.message)\(error.cause.map { ": " + $0 } ?? "")\n")
                }
            }
            try context.out.flushChecked()
        }
        guard summary.failed == 0 else {
            let message = "\(summary.held.counted("file")) held, \(summary.failed) failed"
            if context.json {
                let object: [String: Any] = ["error": ErrorCode.partial.rawValue, "message": message, "held": summary.held, "failed": summary.failed,
                                             "exit_code": Int(ExitCodes.partial)]
                context.err.write(((try? JSONText.render(object)) ?? "{\"error\":\"partial\"}") + "\n")
            } else {
                context.err.write("coven: error: partial: \(message)\n")
            }
            return ExitCodes.partial
        }
        return 0
    }

    /// The JSON object of one held file.
    static func object(_ id: String, path: String, report: ReadReport) -> [String: Any] {
        ["file": id, "path": PathText.text(PathText.osBytes(path)), "source": report.source.rawValue, "bytes_fetched": report.bytesFetched]
    }
}
