import CovenKit
import Foundation

/// `coven budget`: show or set the file cache's budget.
struct BudgetCommand: Command {
    static let name = "budget"
    static let abstract = "show or set the file cache budget"
    static let synopsis = ["[BYTES | default | keep-all]"]
    static let discussion = """
    Without an argument, prints the budget in force and the bytes held against it. With one, \
    stores the choice, trims at once and prints the bytes removed. BYTES is a number of bytes \
    or a size with a unit (500MB, 2GiB). The default is the larger of 2 GiB and a tenth of the \
    volume, held to what leaves a twentieth of the volume free; keep-all never trims. A trim \
    removes what was read longest ago first, never a kept file and never a file being read; \
    namespaces with a budget in the manifest are trimmed to it first.
    """
    static let options: [OptionSpec] = []
    static let arguments = [ArgumentSpec("BUDGET", help: "bytes, default or keep-all", optional: true)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        if let choice = invocation.arguments.first {
            let device = try context.openDevice()
            let lock = try device.lock(wait: !context.noWait)
            defer { _ = lock }
            let removed = try Cache(device).setCacheBudget(choice)
            let budget = try Cache(device).cacheBudget()
            if context.json {
                try context.printJSON(["budget": budget.bytes.map { $0 as Any } ?? NSNull(), "budget_is_default": budget.isDefault, "removed": removed])
            } else {
                context.line("removed \(removed.counted("byte"))")
            }
            return 0
        }
        let device = try context.openDeviceReadOnly()
        let budget = try Cache(device).cacheBudget()
        let usage = try Cache(device).cacheUsage()
        if context.json {
            try context.printJSON(["budget": budget.bytes.map { $0 as Any } ?? NSNull(), "budget_is_default": budget.isDefault, "used": usage.used, "partial": usage.partial])
        } else {
            let shown = budget.bytes.map { $0.counted("byte") } ?? "keep-all"
            context.line("budget \(shown)\(budget.isDefault ? " (default)" : "")")
            context.line("used   \(usage.used.counted("byte")) (\(usage.partial) partial)")
        }
        return 0
    }
}
