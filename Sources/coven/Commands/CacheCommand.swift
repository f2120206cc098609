import CovenKit
import Foundation

/// `coven cache clear`: remove every fetched file coven can fetch again.
struct CacheCommand: Command {
    static let name = "cache"
    static let abstract = "empty the file cache of everything that can be fetched again"
    static let synopsis = ["clear"]
    static let discussion = """
    'clear' removes every cached file and partial download coven can fetch again and prints \
    the bytes removed. Kept files (pinned, or in a kept namespace), uploads not yet sent (never \
    in the cache) and files being read stay. The budget is unchanged.

    The cache also tidies itself: every command that opens the device for writing removes     partial downloads untouched for seven days (unless they are a kept file's) and the files     of entries a crash left half removed, and once a day files in the cache folder that no     entry names.
    """
    static let options: [OptionSpec] = []
    static let arguments = [ArgumentSpec("ACTION", help: "what to do with the cache", choices: ["clear"])]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard invocation.arguments.first == "clear" else { throw CovenError(.usage, "missing ACTION", hint: "coven cache clear") }
        let device = try context.openDevice()
        let lock = try device.lock(wait: !context.noWait)
        defer { _ = lock }
        let removed = try Cache(device).clearCache()
        if context.json {
            try context.printJSON(["removed": removed])
        } else {
            context.line("removed \(removed.counted("byte"))")
        }
        return 0
    }
}
