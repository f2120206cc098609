import CovenKit
import Foundation

/// `coven cat`: a file, or an exact range of it, to stdout.
struct CatCommand: Command {
    static let name = "cat"
    static let abstract = "write a file or an exact range of it to stdout"
    static let synopsis = ["FILE [--offset N] [--length L]"]
    static let discussion = """
    Reads the file from wherever it is: the person's original before upload (checked first: \
    user_file_missing, user_file_changed), coven's own copy, the cache beside the device, or \
    storage. Each 64 KiB chunk of an original or of coven's copy is checked against the hash \
    recorded when it was staged before any of its bytes go out (integrity for coven's copy). \
    A device database that cannot be written is read without keeping anything in the cache. From storage only the encrypted chunks covering the range are fetched, neighbours \
    together up to 1 MiB per request, ahead of the output; each is checked as it arrives and \
    kept in the cache, and the object's size, which each answer gives, must be the record's \
    (an object of any other size is damage: integrity, as for file-status). An answer that \
    covers less than the range asked is a storage fault, retried, then storage: integrity only \
    when bytes fail their check. A cached chunk that fails its check is fetched again, never written. A \
    read of the whole file checks it against the record's hash before its last bytes go out.

    A range outside the file fails with range_out_of_bounds: the output is never short. \
    Offline, a range whose chunks are not cached fails at once with the storage error. A file \
    on another device only fails with device_only. On a full disk the cached files read \
    longest ago (never kept ones) give way to what the read fetches; when even that leaves no \
    room, the read goes on without keeping what does not fit, and says so on stderr ('coven \
    get' fails with no_room instead). Never waits for the device lock.
    """
    static let options = [
        OptionSpec("offset", value: "N", help: "the first byte to write (default 0)"),
        OptionSpec("length", value: "L", help: "how many bytes to write (default: to the end)"),
    ]
    static let arguments = [ArgumentSpec("FILE", help: "the file's id", completion: .fileID)]
    static let mutates = false
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let id = invocation.arguments.first else { throw CovenError(.usage, "missing FILE") }
        let range = ReadRange(offset: try invocation.integer("offset") ?? 0, length: try invocation.integer("length"))
        let device = try context.openDevice()
        let report = try Reader(device).readFile(id, range: range, stop: Stop.process) {
            context.out.write($0)
            // A full disk or a closed stdout stops the read at once: never a short output and 0.
            try context.out.check()
        }
        try context.out.flushChecked()
        if report.chunksRefetched > 0 {
            context.note("warning: \(report.chunksRefetched.counted("cached chunk")) of '\(id)' \(report.chunksRefetched == 1 ? "failed its check and was" : "failed their check and were") fetched again")
        }
        if report.notKept {
            context.note("warning: the disk is full: '\(id)' was read without keeping all of it in the cache")
        }
        return 0
    }
}
