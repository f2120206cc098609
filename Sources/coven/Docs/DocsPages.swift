import CovenKit
import Foundation

/// The docs pages `docs/coven.md` and `docs/coven-<name>.md`: which parts are generated from the
/// registry and which are written by hand.
///
/// A page is markdown with the sections NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXIT STATUS and
/// EXAMPLES. The parts the registry knows (the NAME line, the SYNOPSIS lines, the OPTIONS table;
/// in coven.md also the COMMANDS list) sit between marker comments and are rewritten by
/// `coven __docs` (`make docs`); everything else is prose kept as written. A new page starts as
/// a skeleton whose hand-written parts hold `<!-- fill in: … -->` markers, which the docs test
/// refuses, so no page ships unwritten.
enum DocsPages {
    /// The sections every page has, in order.
    static let requiredSections = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "EXAMPLES"]

    /// What a skeleton leaves for a person to write; a page still holding it is unfinished.
    static let fillInMarker = "<!-- fill in:"

    /// `<!-- generated: NAME (make docs) -->`, the first line of a generated block.
    static func beginMarker(_ block: String) -> String { "<!-- generated: \(block) (make docs) -->" }

    /// The last line of a generated block.
    static let endMarker = "<!-- end generated -->"

    /// One page: its file name, title and sections, each generated or prose.
    struct Page {
        /// A section's body: a generated block (its name and content), or the prose a new page
        /// starts with.
        enum Body {
            case generated(String, String)
            case prose(String)
        }

        var fileName: String
        var title: String
        var sections: [(heading: String, body: Body)]

        /// The generated blocks, in page order (name, content without markers).
        var blocks: [(name: String, content: String)] {
            sections.compactMap { section in
                if case let .generated(name, content) = section.body { return (name, content) }
                return nil
            }
        }
    }

    /// Every page the registry calls for: `coven.md` first, then one per command.
    static func pages(_ dump: RegistryDump) -> [Page] {
        [overview(dump)] + dump.commands.map { page($0, dump) }
    }

    // MARK: - The page of a command

    static func page(_ command: RegistryDump.CommandInfo, _ dump: RegistryDump) -> Page {
        let name = "\(dump.name)-\(command.name)"
        var options = ""
        let rows = command.arguments.map { ("`\($0.name)`", $0.help) } + command.options.map { (optionLabel($0), $0.help) }
        if !rows.isEmpty { options = table(["option", "meaning"], rows) + "\n\n" }
        options += "The global options " + globalList(dump) + " are described in [coven(1)](coven.md)."
        let description = (command.discussion.isEmpty ? "" : command.discussion + "\n\n")
            + "\(fillInMarker) what the command does, what it prints on stdout (and with --json), what it refuses -->"
        return Page(
            fileName: name + ".md", title: "\(name)(1)",
            sections: [
                ("NAME", .generated("name", "\(name) - \(command.abstract)")),
                ("SYNOPSIS", .generated("synopsis", codeBlock(command.usage))),
                ("DESCRIPTION", .prose(description)),
                ("OPTIONS", .generated("options", options)),
                ("EXIT STATUS", .prose("""
                    0 when the command did its job; 2 for a usage error; otherwise the status of the \
                    error's class, as listed in [exit-codes.md](exit-codes.md).
                    """)),
                ("EXAMPLES", .prose("\(fillInMarker) examples a user can paste, each after a sentence saying what it does -->")),
            ])
    }

    // MARK: - coven.md, the overview

    static func overview(_ dump: RegistryDump) -> Page {
        var commands = ""
        for category in [CommandCategory.plumbing, .porcelain] {
            let members = dump.commands.filter { $0.category == category }
            guard !members.isEmpty else { continue }
            if !commands.isEmpty { commands += "\n\n" }
            commands += "### \(category.rawValue) commands\n\n"
            commands += table(["command", "what it does"], members.map { ("[\(dump.name)-\($0.name)(1)](\(dump.name)-\($0.name).md)", $0.abstract) })
        }
        let options = table(["option", "meaning"], dump.globalOptions.map { (optionLabel($0), $0.help) } + [("`--version`", "print coven's version and exit")])
        return Page(
            fileName: dump.name + ".md", title: "\(dump.name)(1)",
            sections: [
                ("NAME", .generated("name", "\(dump.name) - keeps the files of a local-first, end-to-end-encrypted store")),
                ("SYNOPSIS", .generated("synopsis", codeBlock(Help.overviewUsageLines))),
                ("DESCRIPTION", .prose("\(fillInMarker) what coven is, the store, the device, the storage -->")),
                ("OPTIONS", .generated("options", options)),
                ("COMMANDS", .generated("commands", commands)),
                ("EXIT STATUS", .prose("\(fillInMarker) the exit statuses -->")),
                ("EXAMPLES", .prose("\(fillInMarker) examples -->")),
            ])
    }

    // MARK: - Writing and updating a page

    /// A new page: the title, then each section with its generated block or starting prose.
    static func skeleton(_ page: Page) -> String {
        var text = "# \(page.title)\n"
        for (heading, body) in page.sections {
            text += "\n## \(heading)\n\n"
            switch body {
            case let .generated(name, content): text += beginMarker(name) + "\n" + content + "\n" + endMarker + "\n"
            case let .prose(prose): text += prose + "\n"
            }
        }
        return text
    }

    /// `text` with every generated block of `page` rewritten; the prose around them is kept.
    ///
    /// - Throws: ``CovenError`` `.io` when a block's markers are missing or out of order.
    static func update(_ text: String, _ page: Page) throws -> String {
        var result = text
        for (name, content) in page.blocks {
            let begin = beginMarker(name)
            guard let start = result.range(of: begin),
                  let end = result.range(of: endMarker, range: start.upperBound..<result.endIndex)
            else {
                throw CovenError(.io, "docs page '\(page.fileName)' has no generated block '\(name)'",
                                 hint: "put the lines '\(begin)' and '\(endMarker)' back where it belongs")
            }
            result.replaceSubrange(start.upperBound..<end.lowerBound, with: "\n" + content + "\n")
        }
        return result
    }

    // MARK: - Markdown pieces

    /// `` `-p`, `--place WHERE` `` for the OPTIONS tables.
    static func optionLabel(_ option: OptionSpec) -> String {
        var label = option.short.map { "`-\($0)`, " } ?? ""
        label += "`--\(option.long)" + (option.value.map { " \($0)" } ?? "") + "`"
        return label
    }

    /// `` `--db PATH`, `--json`, `-q`/`--quiet` … and `-h`/`--help` ``.
    static func globalList(_ dump: RegistryDump) -> String {
        let labels = dump.globalOptions.map { option in
            (option.short.map { "`-\($0)`/" } ?? "") + "`--\(option.long)" + (option.value.map { " \($0)" } ?? "") + "`"
        }
        guard labels.count > 1, let last = labels.last else { return labels.first ?? "" }
        return labels.dropLast().joined(separator: ", ") + " and " + last
    }

    /// A two-column markdown table (a man page shows no header row).
    static func table(_ header: [String], _ rows: [(String, String)]) -> String {
        var text = "| " + header.joined(separator: " | ") + " |\n|---|---|\n"
        for (left, right) in rows {
            text += "| \(cell(left)) | \(cell(right)) |\n"
        }
        return String(text.dropLast())
    }

    /// A table cell: `|` escaped, lines joined.
    private static func cell(_ text: String) -> String {
        text.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "\n", with: " ")
    }

    /// The lines as one fenced block.
    static func codeBlock(_ lines: [String]) -> String {
        "```\n" + lines.joined(separator: "\n") + "\n```"
    }

    /// The lines of a page's SYNOPSIS code block (what the docs test compares with `--help`).
    static func synopsisLines(ofPage text: String) -> [String]? {
        guard let body = section("SYNOPSIS", ofPage: text) else { return nil }
        let lines = body.components(separatedBy: "\n")
        guard let open = lines.firstIndex(where: { $0.hasPrefix("```") }),
              let close = lines[(open + 1)...].firstIndex(where: { $0.hasPrefix("```") })
        else { return nil }
        return Array(lines[(open + 1)..<close])
    }

    /// The text of `## NAME` up to the next `## ` heading, or nil.
    static func section(_ name: String, ofPage text: String) -> String? {
        let lines = text.components(separatedBy: "\n")
        guard let start = lines.firstIndex(of: "## " + name) else { return nil }
        let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
        return lines[(start + 1)..<end].joined(separator: "\n")
    }

    /// The `## ` headings of a page, in order.
    static func sections(ofPage text: String) -> [String] {
        var inCode = false
        var headings: [String] = []
        for line in text.components(separatedBy: "\n") {
            if line.hasPrefix("```") { inCode.toggle() }
            if !inCode, line.hasPrefix("## ") { headings.append(String(line.dropFirst(3))) }
        }
        return headings
    }
}
