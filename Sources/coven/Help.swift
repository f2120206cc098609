import Foundation

/// `--help` text, rendered from the command table (the docs pages' SYNOPSIS uses the same lines).
///
/// The text is laid out for 80 columns whatever the terminal, so that it is the same in a golden
/// test, a pipe and a man page.
enum Help {
    /// The width help text is wrapped to.
    static let width = 80
    /// Where the right-hand column of option and command rows starts.
    static let column = 28

    /// The usage lines of a command: `coven NAME SYNOPSIS` for each synopsis line.
    static func usageLines(_ command: Command.Type) -> [String] {
        command.synopsis.map { "coven \(command.name)" + ($0.isEmpty ? "" : " \($0)") }
    }

    /// The usage lines of coven itself (the overview's and coven(1)'s SYNOPSIS).
    static let overviewUsageLines = [
        "coven [--db PATH] [--json] [--quiet] [--no-wait] COMMAND [ARGS]",
        "coven help [COMMAND]",
        "coven --version",
    ]

    /// The whole `coven NAME --help` text.
    static func render(_ command: Command.Type) -> String {
        var text = usage(usageLines(command)) + "\n"
        text += command.abstract + "\n"
        if !command.discussion.isEmpty { text += "\n" + paragraphs(command.discussion) }
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

    /// `usage: A` then `   or: B` for each further line.
    static func usage(_ lines: [String]) -> String {
        "usage: " + lines.joined(separator: "\n   or: ") + "\n"
    }

    /// `-q, --quiet` or `    --db PATH`.
    static func label(_ option: OptionSpec) -> String {
        var label = option.short.map { "-\($0), " } ?? "    "
        label += "--\(option.long)"
        if let value = option.value { label += " \(value)" }
        return label
    }

    /// Two columns: `left` from column 2, `right` from ``column``, wrapped to ``width``; a left
    /// side too long for its column puts the right side on the next line.
    static func row(_ left: String, _ right: String) -> String {
        let indent = String(repeating: " ", count: column)
        let lines = wrap(right, width: width - column)
        var text = "  " + left
        if left.count < column - 2 {
            text += String(repeating: " ", count: column - 2 - left.count)
        } else {
            text += "\n" + indent
        }
        text += lines.joined(separator: "\n" + indent) + "\n"
        return text
    }

    /// Wraps each paragraph of `text` (paragraphs are separated by a blank line) to ``width``;
    /// a paragraph whose first line is indented (an example) is kept as written.
    static func paragraphs(_ text: String) -> String {
        text.components(separatedBy: "\n\n").map { paragraph in
            if paragraph.hasPrefix(" ") { return paragraph + "\n" }
            let joined = paragraph.split(separator: "\n").joined(separator: " ")
            return wrap(joined, width: width).joined(separator: "\n") + "\n"
        }.joined(separator: "\n")
    }

    /// Breaks `text` into lines of at most `width` characters at spaces (a longer word stays whole).
    static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var current = ""
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if current.isEmpty {
                current = String(word)
            } else if current.count + 1 + word.count <= width {
                current += " " + word
            } else {
                lines.append(current)
                current = String(word)
            }
        }
        lines.append(current)
        return lines
    }

    /// `coven --help`: the usage, then the commands grouped plumbing first, then porcelain.
    static func overview() -> String {
        var text = usage(overviewUsageLines) + "\n"
        text += "coven keeps the files of a local-first, end-to-end-encrypted store\n\n"
        for category in [CommandCategory.plumbing, .porcelain] {
            let commands = CommandRegistry.all.filter { $0.category == category }
            guard !commands.isEmpty else { continue }
            text += "\(category.rawValue) commands:\n"
            for command in commands { text += row(command.name, command.abstract) }
            text += "\n"
        }
        text += "global options:\n"
        for option in GlobalOptions.specs { text += row(label(option), option.help) }
        text += "\nsee 'coven help COMMAND' or 'man coven-COMMAND'\n"
        return text
    }
}
