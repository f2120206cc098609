import CovenKit
import Foundation

/// `coven uploads`: the upload queue.
struct UploadsCommand: Command {
    static let name = "uploads"
    static let abstract = "list this device's upload queue, oldest first"
    static let synopsis = ["[--json] [-z] [--watch [--until-empty]]"]
    static let discussion = """
    Prints one line per file with a queued upload, oldest first: the file id, what it waits \
    for, the bytes the provider confirmed, the encrypted size, the attempts made, the move \
    (empty for a bound upload) and the last error's code and message, separated by tabs (-z: \
    each of the eight fields ends with NUL, the message as it is). What it waits for is one of storage (its turn), sending, pause, \
    network (unmetered-only on a metered network), retry (a backoff), source (its original is \
    missing or changed, or coven's copy fails its check), move (stored, waiting for the other \
    files of its move), failed (attempts spent: see 'coven retry') and retire. With --json, one \
    array of objects. Reads only.

    With --watch, prints the queue once, then again each time it changes, woken by another \
    process committing to the device (never a busy poll), each listing followed by an empty \
    line (-z: one more NUL; --json: one array a line), until a signal or, with --until-empty, \
    until the queue is empty: another terminal watches an import go up, and a script waits \
    for it with coven uploads --watch --until-empty.
    """
    static let options = [
        CommandContext.nulTerminatedOption,
        OptionSpec("watch", help: "print the queue again each time it changes, until a signal"),
        OptionSpec("until-empty", help: "with --watch: end once the queue is empty"),
    ]
    static let mutates = false
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        if invocation.has("watch") {
            return try watch(invocation, context, device: device)
        }
        if invocation.has("until-empty") { throw CovenError(.usage, "--until-empty goes with --watch") }
        let uploads = try Uploads(device).uploads()
        if context.json {
            try context.printJSON(uploads.map(json))
            return 0
        }
        let zero = invocation.has("null-terminated")
        for upload in uploads { try context.record(fields(upload, zero: zero), nulTerminated: zero) }
        return 0
    }

    /// The fields of an upload's line (a tab or newline of its error message a space, but under -z).
    static func fields(_ upload: QueuedUpload, zero: Bool) -> [String] {
        let message = upload.errorMessage ?? ""
        return [upload.file, upload.waitingFor, String(upload.bytesConfirmed), String(upload.bytesTotal),
                String(upload.attempts), upload.move ?? "", upload.error ?? "",
                zero ? message : message.replacingOccurrences(of: "\t", with: " ").replacingOccurrences(of: "\n", with: " ")]
    }

    static func json(_ upload: QueuedUpload) -> [String: Any] {
        [
            "file": upload.file, "position": upload.position, "move": upload.move.map { $0 as Any } ?? NSNull(),
            "state": upload.state.rawValue, "waiting_for": upload.waitingFor, "bound": upload.bound, "attempts": upload.attempts,
            "bytes_confirmed": upload.bytesConfirmed, "bytes_total": upload.bytesTotal,
            "error": upload.error.map { $0 as Any } ?? NSNull(), "error_message": upload.errorMessage.map { $0 as Any } ?? NSNull(),
        ]
    }

    /// `--watch`: the listing again each time it changes, until a signal or an empty queue.
    static func watch(_ invocation: Invocation, _ context: CommandContext, device: Device) throws -> Int32 {
        let zero = invocation.has("null-terminated")
        return try context.watch(device, untilEmpty: invocation.has("until-empty"), nulTerminated: zero) {
            let uploads = try Uploads(device).uploads()
            if context.json { return (try JSONText.render(uploads.map(json)) + "\n", uploads.isEmpty) }
            return (try uploads.map { try CommandContext.recordText(fields($0, zero: zero), nulTerminated: zero) }.joined(), uploads.isEmpty)
        }
    }
}
