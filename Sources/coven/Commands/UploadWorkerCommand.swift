import CovenKit
import Foundation

/// `coven upload-worker`: send the queued uploads.
struct UploadWorkerCommand: Command {
    static let name = "upload-worker"
    static let abstract = "send queued uploads to storage, resumably, in parallel"
    static let synopsis = ["[--once] [--jobs N]"]
    static let discussion = """
    Sends this device's queued uploads, oldest first, with bound uploads beside trailing ones. \
    An object of at most 32 MiB (or the provider's single-request limit, if less) goes in one \
    request; a larger one in parts of whole sealed chunks, each part recorded once the provider \
    confirms it, so a worker killed part way resumes from its confirmed parts; an upload \
    started just before a kill and never recorded is found by its name and abandoned by the \
    next start of that object's upload (or its retirement). Every attempt \
    checks the source's size (and an original's modification time) before sending a byte, and \
    each 64 KiB chunk against its recorded hash before encrypting it.

    Without --once the worker runs until SIGINT or SIGTERM, looking at the queue every few \
    seconds. A signal ends it within a second, even with a request in flight or stalled, with \
    status 130: the upload in flight goes back to the queue and resumes from its confirmed \
    parts. With --once it drains the queue (retrying failures as their backoff falls due) and \
    exits: 0 when everything it could send was stored, 10 (partial) with a summary on stderr \
    (one JSON object with --json) when some upload failed or waits for its original.

    The worker never holds the device lock while it sends: each claim, confirmed part and \
    outcome is one short transaction. Each upload is claimed under a lease, so two workers at \
    once (overlapping cron runs) never send one upload twice. Small files go a batch at a \
    time: up to 256 whole objects claimed in one transaction, sent on the job's lanes at once, \
    made durable together and recorded in one transaction; a batch a kill left unrecorded is taken over by the next run, \
    which sends none of its objects that storage already holds whole.
    """
    static let options = [
        OptionSpec("once", help: "drain the queue, then exit (for cron)"),
        OptionSpec("jobs", short: "j", value: "N", help: "uploads sent at once (default 2)"),
    ]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let jobs = try invocation.integer("jobs") ?? 2
        guard jobs >= 1, jobs <= 64 else { throw CovenError(.usage, "--jobs takes 1 to 64, not \(jobs)") }
        let once = invocation.has("once")
        let display = WorkerDisplay(context)
        let summary = try UploadWorker.run(
            paths: DevicePaths(database: context.databasePath), jobs: Int(jobs), once: once,
            settings: UploadSettings(environment: context.environment),
            storageOptions: StorageOptions(environment: context.environment),
            stop: Stop.process, events: { display.show($0) })
        display.finish()
        if summary.interrupted {
            // Stopped by a signal (Ctrl-C, `systemctl stop`): what was sent stays, an upload
            // in flight goes back to the queue and resumes from its confirmed parts.
            if let reason = Stop.process.reason { throw CovenError(.interrupted, "upload-worker stopped: \(reason)") }
        }
        guard summary.complete else {
            report(summary, context)
            return ExitCodes.partial
        }
        if context.json {
            try context.printJSON(json(summary))
        } else if !context.quiet && context.showsProgress {
            context.note("\(summary.stored) stored")
        }
        return 0
    }

    static func json(_ summary: UploadRunSummary) -> [String: Any] {
        func list(_ items: [(files: [String], code: ErrorCode, message: String)]) -> [[String: Any]] {
            items.map { ["files": $0.files, "error": $0.code.rawValue, "message": $0.message] }
        }
        return [
            "stored": summary.stored, "retried": summary.retried, "dropped": summary.dropped,
            "failed": list(summary.failed), "waiting": list(summary.waiting),
        ]
    }

    /// The summary of a partial run, on stderr.
    static func report(_ summary: UploadRunSummary, _ context: CommandContext) {
        if context.json {
            var object = json(summary)
            object["error"] = ErrorCode.partial.rawValue
            object["message"] = "\(summary.failed.count.counted("upload")) failed, \(summary.waiting.count) \(summary.waiting.count == 1 ? "waits for its" : "wait for their") source"
            object["exit_code"] = Int(ExitCodes.partial)
            context.err.write(((try? JSONText.render(object)) ?? "{\"error\":\"partial\"}") + "\n")
            return
        }
        context.err.write("coven: error: partial: \(summary.stored) stored, \(summary.failed.count) failed, \(summary.waiting.count) waiting for their source\n")
        for item in summary.failed {
            context.err.write("coven: failed: \(item.files.joined(separator: ",")): \(item.code.rawValue): \(item.message)\n")
        }
        for item in summary.waiting {
            context.err.write("coven: waiting: \(item.files.joined(separator: ",")): \(item.code.rawValue): \(item.message)\n")
        }
        context.err.write("coven: hint: see 'coven uploads'; 'coven retry' tries failed uploads again\n")
    }
}

/// Progress of the worker's jobs on one stderr line, only when stderr is a terminal.
private final class WorkerDisplay: @unchecked Sendable {
    // @unchecked: every field is used under `lock`.
    private let lock = NSLock()
    private let line: ProgressLine
    private var objects: [String: (Int64, Int64)] = [:]

    init(_ context: CommandContext) {
        line = ProgressLine(context, label: "uploading", total: nil)
    }

    func show(_ event: UploadEvent) {
        lock.lock()
        defer { lock.unlock() }
        switch event {
        case .progress(let object, let confirmed, let total):
            objects[object] = (confirmed, total)
        case .finished(let object, _, _):
            objects[object] = nil
        }
        line.update(objects.values.reduce(0) { $0 + $1.0 })
    }

    func finish() {
        lock.lock()
        defer { lock.unlock() }
        line.finish()
    }
}
