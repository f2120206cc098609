import CovenKit
import Foundation

/// `coven pause`: pause trailing uploads, or send them on unmetered networks only.
struct PauseCommand: Command {
    static let name = "pause"
    static let abstract = "pause trailing uploads, or limit them to unmetered networks"
    static let synopsis = ["[--unmetered-only]"]
    static let discussion = """
    Pauses this device's trailing uploads: each keeps its place in the queue and a running \
    worker starts no new one (an upload already being sent is finished). Bound uploads run on, since writes \
    wait for them. With --unmetered-only, uploads are not paused but wait while the network is \
    metered; a worker started with COVEN_NETWORK_METERED=1 declares the network metered (the \
    coven_network view shows both). 'coven resume' undoes either. With --json, prints the \
    settings as one object.
    """
    static let options = [
        OptionSpec("unmetered-only", help: "send trailing uploads only while the network is not metered"),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDevice()
        if invocation.has("unmetered-only") {
            try Uploads(device).setUnmeteredOnly(true)
        } else {
            try Uploads(device).setUploadsPaused(true)
        }
        if context.json { try context.printJSON(json(try Uploads(device).uploadPause())) }
        return 0
    }

    static func json(_ pause: UploadPause) -> [String: Any] {
        ["paused": pause.paused, "unmetered_only": pause.unmeteredOnly, "metered": pause.metered, "queued": pause.queued]
    }
}
