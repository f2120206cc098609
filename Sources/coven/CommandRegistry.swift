import CovenKit
import Foundation

/// Every subcommand, once: drives dispatch, help, the docs pages and the completions (as git's
/// `commands[]` does). Adding a command is one line here plus its file, docs page and golden cases
/// (the checklist is in Tests/golden/README.md).
enum CommandRegistry {
    static let all: [Command.Type] = [
        InitCommand.self,
        MigrateCommand.self,
        KeyCommand.self,
        MemberCommand.self,
        MembersCommand.self,
        CircleCommand.self,
        CirclesCommand.self,
        StageCommand.self,
        UnstageCommand.self,
        WriteCommand.self,
        SQLCommand.self,
        StatusCommand.self,
        UploadWorkerCommand.self,
        UploadsCommand.self,
        PauseCommand.self,
        ResumeCommand.self,
        RetryCommand.self,
        FileStatusCommand.self,
        CatCommand.self,
        GetCommand.self,
        PinCommand.self,
        UnpinCommand.self,
        BudgetCommand.self,
        CacheCommand.self,
        FetchKeptCommand.self,
        MoveCommand.self,
        MovesCommand.self,
        MakeDeviceOnlyCommand.self,
        SyncCommand.self,
        GcCommand.self,
        FsckCommand.self,
        JoinCommand.self,
        SnapshotCommand.self,
        DevicesCommand.self,
        DeviceCommand.self,
        StorageCommand.self,
        LostCommand.self,
        TrashCommand.self,
        UndeleteCommand.self,
        CompletionsCommand.self,
    ]

    /// Maintainer tools (`__docs`, `__man`, `__registry`): dispatched like any command but left
    /// out of help, docs pages and completions.
    static let hidden: [Command.Type] = [
        DocsGeneratorCommand.self,
        ManRendererCommand.self,
        RegistryDumpCommand.self,
    ]

    /// The command named `name`, public or hidden.
    static func find(_ name: String) -> Command.Type? {
        all.first { $0.name == name } ?? hidden.first { $0.name == name }
    }
}
