import CovenKit
import Foundation

/// `coven completions bash|zsh|fish`: prints the completion script for a shell, rendered from
/// the command registry (see ``Completions``).
struct CompletionsCommand: Command {
    static let name = "completions"
    static let abstract = "print the completion script for bash, zsh or fish"
    static let synopsis = ["SHELL"]
    static let discussion = """
        The script completes command words, options, the values of options with a fixed set \
        of choices, paths, and file ids (by running 'coven sql' on the device named by --db or \
        COVEN_DB, quietly). It is rendered from the same command table as this help, so it \
        knows every command of this coven.
        """
    static let options: [OptionSpec] = []
    static let arguments = [
        ArgumentSpec("SHELL", help: "the shell: bash, zsh or fish", choices: Completions.Shell.allCases.map(\.rawValue)),
    ]
    static let mutates = false
    static let category = CommandCategory.plumbing

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let word = invocation.arguments.first, let shell = Completions.Shell(rawValue: word) else {
            throw CovenError(.internal, "the parser let an unknown shell through")
        }
        context.out.write(Completions.render(shell, RegistryDump.current()))
        return ExitCodes.success
    }
}
