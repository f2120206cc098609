import Foundation

/// A `Codable` description of coven's public command line: every command of
/// ``CommandRegistry/all`` with its options and arguments, and the global options.
///
/// The completion scripts render from it (as swift-argument-parser's `ToolInfoV0`), and
/// `coven __registry` prints it as JSON for tools and tests. Hidden commands are not in it.
struct RegistryDump: Codable, Sendable {
    /// One command as the shells and the docs see it.
    struct CommandInfo: Codable, Sendable {
        var name: String
        var abstract: String
        /// The paragraphs `--help` shows after the abstract.
        var discussion: String
        var category: CommandCategory
        /// The usage lines, each starting `coven NAME`.
        var usage: [String]
        var options: [OptionSpec]
        var arguments: [ArgumentSpec]
        var mutates: Bool
    }

    /// The program's name (`coven`).
    var name: String
    var version: String
    /// The options every command takes (`--db`, `--json`, …).
    var globalOptions: [OptionSpec]
    var commands: [CommandInfo]

    /// The dump of the registry as built into this binary.
    static func current() -> RegistryDump {
        RegistryDump(
            name: "coven", version: CLI.version, globalOptions: GlobalOptions.specs,
            commands: CommandRegistry.all.map { command in
                CommandInfo(
                    name: command.name, abstract: command.abstract, discussion: command.discussion, category: command.category,
                    usage: Help.usageLines(command), options: command.options,
                    arguments: command.arguments, mutates: command.mutates)
            })
    }

    /// The commands a shell completes after `coven`: the registry's, plus the built-in `help`
    /// whose argument is a command name.
    var completableCommands: [CommandInfo] {
        let help = CommandInfo(
            name: "help", abstract: "show the help of coven or of one command", discussion: "", category: .porcelain,
            usage: ["coven help [COMMAND]"], options: [],
            arguments: [ArgumentSpec("COMMAND", help: "a command", optional: true, choices: commands.map(\.name))],
            mutates: false)
        return commands + [help]
    }

    /// The option table of a command as the parser sees it: its own options, then the globals.
    func optionTable(_ command: CommandInfo) -> [OptionSpec] {
        command.options + globalOptions
    }

    /// The dump as pretty, key-sorted JSON.
    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}
