import CovenKit
import Foundation

/// `coven fetch-kept`: fetch every kept file not held.
struct FetchKeptCommand: Command {
    static let name = "fetch-kept"
    static let abstract = "fetch every kept file this device does not hold, smallest first"
    static let synopsis = ["[--json]"]
    static let discussion = """
    Fetches each kept file (pinned, or in a namespace the manifest declares kept) that is not \
    held whole, smallest first, eight at once (their fetches, syncs and commits overlap); a partial resumes with its missing chunks, and a file a read \
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
        // Each file's item as it comes: a library of 100,000 files is never held as values.
        let fetched = OutputSpool(separator: ",", folder: device.paths.temporary)
        let failed = OutputSpool(separator: context.json ? "," : "\n", folder: device.paths.temporary)
        let result = try KeptFiles(device).fetchKept(stop: Stop.process, each: { item in
            if context.json {
                if let error = item.error {
                    try failed.append("{\"code\":\(JSONText.string(error.code.rawValue)),\"file\":\(JSONText.string(item.file)),"
                        + "\"message\":\(JSONText.string(error.description)),\"size\":\(item.size)}")
                } else {
                    try fetched.append("{\"bytes_fetched\":\(item.bytesFetched),\"file\":\(JSONText.string(item.file)),\"size\":\(item.size)}")
                }
            } else if let error = item.error {
                try failed.append("failed \(item.file): \(error.code.rawValue) \(error.description)")
            }
        })
        let status: Int32
        switch result.stop {
        case .done: status = result.failedCount == 0 ? ExitCodes.success : ExitCodes.partial
        case .noRoom: status = ExitCodes.noRoom
        case .offline, .throttled: status = ExitCodes.storage
        case .interrupted: status = ExitCodes.interrupted
        }
        if context.json {
            // One object, its keys in the order JSONText gives (sorted), its lists from the spools.
            let out = context.out
            out.write("{\"already_held\":\(result.alreadyHeld),")
            if let error = result.stopError {
                out.write("\"error\":" + (try JSONText.render(["code": error.code.rawValue, "message": error.description])) + ",")
            }
            out.write("\"exit_code\":\(status),\"failed\":[")
            try failed.write(to: out)
            out.write("],\"fetched\":[")
            try fetched.write(to: out)
            out.write("],\"remaining\":\(result.remaining),\"stop\":\(JSONText.string(result.stop.rawValue)),\"waited\":"
                      + (try JSONText.render(result.waited)) + "}\n")
        } else {
            context.report("fetched \(result.fetchedCount.counted("file")) (\(result.fetchedBytes.counted("byte"))), \(result.alreadyHeld) already held, \(result.failedCount) failed, \(result.remaining) left")
            if failed.count > 0 {
                try failed.write(to: context.out)
                context.out.write("\n")
            }
            if let error = result.stopError {
                context.line("stopped: \(error.code.rawValue): \(error.description)")
            }
        }
        return status
    }
}
