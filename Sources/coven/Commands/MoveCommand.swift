import CovenKit
import Foundation

/// `coven move`: move device-only files to the cloud as one move, or cancel a move.
struct MoveCommand: Command {
    static let name = "move"
    static let abstract = "move files on this device only to the cloud as one move, or cancel one"
    static let synopsis = ["FILE...", "--cancel MOVE"]
    static let discussion = """
    Makes the files one move, in a write of its own, and prints the move's id. Nothing is read \
    now: the upload worker sends each file from its original, checked against the size, \
    modification time and chunk hashes its staging recorded, or from coven's copy (a copy that \
    make-device-only wrote is first read whole and checked against its content hash, which gives \
    its chunk hashes, so an edit fails the move before any byte is sent). None of the \
    files switches to the cloud until every one is stored; then one write switches them all. \
    A move survives restarts. 'coven moves' lists the moves under way or failed, and the move \
    column of coven_uploads names each upload's move. Inside 'coven write' the same is \
    coven_move_to_cloud(FILE, ...) and coven_cancel_move(MOVE).

    Refused: a file on another device (not_this_device), one already in the cloud or \
    uploading (not_device_only_here), one already in a move under way or failed (file_in_move, \
    naming the move).

    With --cancel, cancels a move under way or failed: it switches nothing, its files stay on \
    this device only, and its uploads end (the upload worker aborts one it began). A failed \
    move stays listed until it is cancelled.
    """
    static let options = [
        OptionSpec("cancel", value: "MOVE", help: "cancel the move MOVE instead of making one"),
    ]
    static let arguments = [ArgumentSpec("FILE", help: "a file on this device only", optional: true, repeating: true, completion: .fileID)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        if let move = invocation.value("cancel") {
            guard invocation.arguments.isEmpty else {
                throw CovenError(.usage, "give either FILE... or --cancel MOVE, not both")
            }
            let device = try context.openDevice()
            try Moves(device).cancelMove(move)
            if context.json { try context.printJSON(["move": move, "state": MoveState.cancelled.rawValue]) }
            return 0
        }
        guard !invocation.arguments.isEmpty else {
            throw CovenError(.usage, "missing FILE", hint: "name the files to move, or give --cancel MOVE")
        }
        let device = try context.openDevice()
        let move = try Moves(device).moveToCloud(files: invocation.arguments)
        if context.json {
            try context.printJSON(["move": move, "files": invocation.arguments])
        } else {
            context.line(move)
        }
        return 0
    }
}
