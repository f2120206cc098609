import CovenKit
import Foundation

/// `coven unstage`: take back staged files and prepared originals no write has put.
struct UnstageCommand: Command {
    static let name = "unstage"
    static let abstract = "take back staged files and prepared originals"
    static let synopsis = ["ID...", "--all", "--changed"]
    static let discussion = """
    Forgets each staged file or prepared original named (the ids 'coven stage' printed), and \
    removes coven's copy of staged app bytes; a person's original is never touched. --all takes \
    back every one; --changed those that can no longer be put as staged: an original missing or \
    changed since it was prepared (a write would refuse it with user_file_changed, and fsck \
    reports it at every run), a staged copy missing or not its recorded bytes. Prints the ids \
    taken back, one a line. All or nothing: an id that names no staged file is not_found, and \
    nothing is taken back.
    """
    static let options: [OptionSpec] = [
        OptionSpec("all", help: "take back every staged file and prepared original"),
        OptionSpec("changed", help: "take back those whose original or copy changed or went missing since"),
    ]
    static let arguments = [ArgumentSpec("ID", help: "ids 'coven stage' printed", optional: true, repeating: true)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let all = invocation.has("all"), changed = invocation.has("changed")
        let given = [all, changed, !invocation.arguments.isEmpty].filter { $0 }.count
        guard given == 1 else {
            throw CovenError(.usage, given == 0 ? "missing ID, --all or --changed" : "give one of ID..., --all or --changed",
                             hint: "'coven sql \"SELECT id, path, copy FROM coven_staged\"' lists what is staged")
        }
        let selection: Unstage.Selection = all ? .all : (changed ? .changed : .ids(invocation.arguments))
        let device = try context.openDevice()
        let taken = try Unstage(device: device).run(selection)
        if context.json {
            try context.printJSON(["unstaged": taken])
        } else {
            taken.forEach(context.line)
        }
        return 0
    }
}
