import CovenKit
import Foundation

/// `coven resume`: resume paused uploads, or lift the unmetered-only setting.
struct ResumeCommand: Command {
    static let name = "resume"
    static let abstract = "resume paused uploads, or send them on any network again"
    static let synopsis = ["[--any-network]"]
    static let discussion = """
    Resumes this device's trailing uploads after 'coven pause'; a running worker picks them up \
    at its next look at the queue. With --any-network, lifts the unmetered-only setting of \
    'coven pause --unmetered-only' instead, leaving a pause as it is. With --json, prints the \
    settings as one object.
    """
    static let options = [
        OptionSpec("any-network", help: "send trailing uploads on metered networks too"),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDevice()
        if invocation.has("any-network") {
            try Uploads(device).setUnmeteredOnly(false)
        } else {
            try Uploads(device).setUploadsPaused(false)
        }
        if context.json { try context.printJSON(PauseCommand.json(try Uploads(device).uploadPause())) }
        return 0
    }
}
