import CovenKit

/// `coven pin` and `coven unpin`: change which files are kept, under the device lock, and print
/// the ids whose state changed, one a line (`--json`: `{KEY: [FILE, ...]}`).
enum KeptFilesChange {
    static func run(
        _ invocation: Invocation, _ context: CommandContext, listedAs key: String,
        change: (Device, [String]) throws -> [String]
    ) throws -> Int32 {
        guard !invocation.arguments.isEmpty else { throw CovenError(.usage, "missing FILE") }
        let device = try context.openDevice()
        let lock = try device.lock(wait: !context.noWait)
        defer { _ = lock }
        let changed = try change(device, invocation.arguments)
        if context.json {
            try context.printJSON([key: changed])
        } else {
            changed.forEach(context.line)
        }
        return 0
    }
}
