import CovenKit
import Foundation

/// `coven stage`: stage app bytes, or prepare a person's original.
struct StageCommand: Command {
    static let name = "stage"
    static let abstract = "stage app bytes or prepare a person's original for a write"
    static let synopsis = [
        "(PATH | -) --namespace NS [--place cloud|device-only]",
        "--user PATH --namespace NS [--place cloud|device-only]",
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
    """
    static let options = [
        OptionSpec("user", value: "PATH", help: "prepare the person's original at PATH instead of copying bytes", completion: .file),
        OptionSpec("namespace", short: "n", value: "NS", help: "the declared namespace the file belongs to"),
        OptionSpec("place", value: "WHERE", help: "cloud (uploaded, the default) or device-only", choices: ["cloud", "device-only"]),
    ]
    static let arguments = [ArgumentSpec("PATH", help: "app bytes to stage, or - for stdin", optional: true, completion: .file)]
    static let mutates = true
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let namespace = invocation.value("namespace") else { throw CovenError(.usage, "missing --namespace NS") }
        let place = Place(rawValue: invocation.value("place") ?? "cloud") ?? .cloud
        let device = try context.openDevice()
        let staged: StagedFile
        if let user = invocation.value("user") {
            guard invocation.arguments.isEmpty else {
                throw CovenError(.usage, "give either --user PATH or PATH, not both")
            }
            let total = PathText.withCString(user) { path -> Int64? in
                var info = stat()
                return stat(path, &info) == 0 ? Int64(info.st_size) : nil
            }
            let progress = ProgressLine(context, label: "reading", total: total)
            defer { progress.finish() }
            staged = try device.prepareUserFile(path: user, namespace: namespace, place: place, wait: !context.noWait, stop: Stop.process, progress: progress.update)
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
            staged = try device.stageAppBytes(from: descriptor, sourceName: source == "-" ? "stdin" : source, namespace: namespace, place: place, wait: !context.noWait, stop: Stop.process, progress: progress.update)
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
            try? device.discardStaged(staged.id)
            throw error
        }
        return 0
    }
}
