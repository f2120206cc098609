import CovenKit
import Foundation

/// `coven moves`: the moves under way or failed, one line per file.
struct MovesCommand: Command {
    static let name = "moves"
    static let abstract = "list the moves under way or failed, one line per file"
    static let synopsis = ["[-z]"]
    static let discussion = """
    Prints one line per file of each move that is under way (moving) or failed, oldest move \
    first: the move's id, its state, the file's id, the error code that failed it and the \
    original the failure names (as text, with bytes that are not UTF-8 as \\xNN), separated by \
    tabs, an empty field for none. With -z each of the five fields ends with NUL. With \
    --json, one array of objects with the keys move, state, file, path (the file's original \
    here, or null for an app file), error, error_message, error_file and created_at. This is \
    the coven_moves view of 'coven sql'. A failed move stays listed until 'coven move --cancel \
    MOVE'; a done or cancelled one is not listed.
    """
    static let options = [
        CommandContext.nulTerminatedOption,
    ]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        let moves = try Moves(device).moves()
        if context.json {
            try context.printJSON(moves.map { entry -> [String: Any] in
                [
                    "move": entry.move, "state": entry.state.rawValue, "file": entry.file,
                    "path": entry.path.map { $0 as Any } ?? NSNull(),
                    "error": entry.error.map { $0 as Any } ?? NSNull(),
                    "error_message": entry.errorMessage.map { $0 as Any } ?? NSNull(),
                    "error_file": entry.errorFile.map { $0 as Any } ?? NSNull(),
                    "created_at": entry.createdAt,
                ]
            })
            return 0
        }
        for entry in moves {
            try context.record([entry.move, entry.state.rawValue, entry.file, entry.error ?? "", entry.errorFile ?? ""], nulTerminated: invocation.has("null-terminated"))
        }
        return 0
    }
}
