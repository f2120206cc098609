import Foundation

/// `--help` text, rendered from the command table (the docs pages' SYNOPSIS uses the same lines).
enum Help {
    static func usageLines(_ command: Command.Type) -> [String] {
        command.synopsis.map { "coven \(command.name)" + ($0.isEmpty ? "" : " \($0)") }
    }

    static func render(_ command: Command.Type) -> String {
        var text = "usage: " + usageLines(command).joined(separator: "\n   or: ") + "\n\n"
        text += command.abstract + "\n"
        if !command.discussion.isEmpty { text += "\n" + command.discussion + "\n" }
        if !command.arguments.isEmpty {
            text += "\narguments:\n"
            for argument in command.arguments { text += row(argument.name, argument.help) }
        }
        if !command.options.isEmpty {
            text += "\noptions:\n"
            for option in command.options { text += row(label(option), option.help) }
        }
        text += "\nglobal options:\n"
        for option in GlobalOptions.specs { text += row(label(option), option.help) }
        return text
    }

    static func label(_ option: OptionSpec) -> String {
        var label = option.short.map { "-\($0), " } ?? "    "
        label += "--\(option.long)"
        if let value = option.value { label += " \(value)" }
        return label
    }

    static func row(_ left: String, _ right: String) -> String {
        let padded = left.count < 26 ? left.padding(toLength: 26, withPad: " ", startingAt: 0) : left + "\n" + String(repeating: " ", count: 28)
        return "  " + padded + right + "\n"
    }

    static func overview() -> String {
        var text = "usage: coven [--db PATH] [--json] [--quiet] [--no-wait] COMMAND [ARGS]\n\n"
        text += "coven keeps the files of a local-first, end-to-end-encrypted store\n\n"
        for category in [CommandCategory.plumbing, .porcelain] {
            let commands = CommandRegistry.all.filter { $0.category == category }
            guard !commands.isEmpty else { continue }
            text += category == .plumbing ? "plumbing commands:\n" : "porcelain commands:\n"
            for command in commands { text += row(command.name, command.abstract) }
            text += "\n"
        }
        text += "see 'coven COMMAND --help' or 'man coven-COMMAND'\n"
        return text
    }
}
