import CovenKit
import Foundation

/// `coven fetch-kept`: fetch every kept file not held.
struct FetchKeptCommand: Command {
    static let name = "fetch-kept"
    static let abstract = "fetch every kept file this device does not hold, smallest first"
    static let synopsis = ["[--json]"]
    static let discussion = """
    Fetches each kept file (pinned, or in a namespace the manifest declares kept) that is not \
    held whole, smallest first, four at once (their fetches, syncs and commits overlap); a partial resumes with its missing chunks, and a file a read \
    brought into the cache whole without syncing it is checked and synced (listed as fetched, \
    0 bytes). Waits out a server \
    that asks for a wait of a minute or less. Stops at the first file the disk has no room for, \
    once the cached files read longest ago that are not kept have given way (exit 7), once storage cannot be reached (exit 5), or once the server asks for a longer \
    wait (exit 5); passes over a file that fails otherwise, reports it and ends with exit 10. \
    Ctrl-C stops it after the runs of chunks in flight (exit 130; a second Ctrl-C ends it at \
    once); the files already fetched stay, and the bytes of those in \
    flight stay as partials. Prints a summary (under -q only the files that failed), or one JSON object with --json. Run it from cron \
    after each sync.
    """
    static let options: [OptionSpec] = []
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDevice()
        let lock = try device.lock(wait: !context.noWait)
        defer { _ = lock }
        let result = try device.fetchKept(stop: Stop.process)
        let status: Int32
        switch result.stop {
        case .done: status = result.failed.isEmpty ? ExitCodes.success : ExitCodes.partial
        case .noRoom: status = ExitCodes.noRoom
        case .offline, .throttled: status = ExitCodes.storage
        case .interrupted: status = ExitCodes.interrupted
        }
        if context.json {
            var object: [String: Any] = [
                "stop": result.stop.rawValue,
                "fetched": result.fetched.map { ["file": $0.file, "size": $0.size, "bytes_fetched": $0.bytesFetched] },
                "failed": result.failed.map { ["file": $0.file, "size": $0.size, "code": $0.error?.code.rawValue ?? "", "message": $0.error?.description ?? ""] },
                "already_held": result.alreadyHeld,
                "remaining": result.remaining,
                "waited": result.waited,
                "exit_code": Int(status),
            ]
            if let error = result.stopError {
                object["error"] = ["code": error.code.rawValue, "message": error.description]
            }
            try context.printJSON(object)
        } else {
            let bytes = result.fetched.reduce(Int64(0)) { $0 + $1.size }
            context.report("fetched \(result.fetched.count.counted("file")) (\(bytes.counted("byte"))), \(result.alreadyHeld) already held, \(result.failed.count) failed, \(result.remaining) left")
            for item in result.failed {
                context.line("failed \(item.file): \(item.error?.code.rawValue ?? "") \(item.error?.description ?? "")")
            }
            if let error = result.stopError {
                context.line("stopped: \(error.code.rawValue): \(error.description)")
            }
        }
        return status
    }
}
