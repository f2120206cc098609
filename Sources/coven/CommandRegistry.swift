import CovenKit
import Foundation

/// Every subcommand, once: drives dispatch, help, the docs pages and the completions (as git's
/// `commands[]` does). Adding a command is one line here plus its file, docs page and tests.
enum CommandRegistry {
    static let all: [Command.Type] = [
        InitCommand.self,
        MigrateCommand.self,
        KeyCommand.self,
        StageCommand.self,
        WriteCommand.self,
        SQLCommand.self,
        StatusCommand.self,
    ]

    static func find(_ name: String) -> Command.Type? {
        all.first { $0.name == name }
    }
}
