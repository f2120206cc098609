import CovenKit
import Foundation

/// `coven get`: make sure a whole file is held; print the held copy's path.
struct GetCommand: Command {
    static let name = "get"
    static let abstract = "make sure a whole file is held on this device and print its path"
    static let synopsis = ["FILE"]
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
    """
    static let options: [OptionSpec] = []
    static let arguments = [ArgumentSpec("FILE", help: "the file's id", completion: .fileID)]
    static let mutates = false
    static let pollsStop = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let id = invocation.arguments.first else { throw CovenError(.usage, "missing FILE") }
        let device = try context.openDevice()
        let (path, report) = try device.holdFile(id, stop: Stop.process)
        if context.json {
            try context.printJSON(["file": id, "path": path, "source": report.source.rawValue, "bytes_fetched": report.bytesFetched])
        } else {
            context.line(path)
        }
        return 0
    }
}
