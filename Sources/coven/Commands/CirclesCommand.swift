import CovenKit
import Foundation

/// `coven circles`: the circles of this device's member.
struct CirclesCommand: Command {
    static let name = "circles"
    static let abstract = "list the circles this device's member is in"
    static let synopsis = ["[--json] [-z]"]
    static let discussion = """
    One line per circle this device's member is in, or was in, read from storage first (every \
    link of each circle's chain checked): its id (what a row's audience column holds), the \
    newest generation of its key this member opened, 'member' or 'removed' (no longer on its \
    newest roster: what was read stays, nothing sealed after is), its name (a control character \
    or backslash escaped as \\t, \\n, \\\\ or \\xNN), and its members' names, comma-separated, \
    each followed by '*' for an admin of the circle. A circle this member was never in is not \
    listed: its name and roster are sealed under its key. With -z, five fields a circle, each \
    ended by NUL, the names as they are. With --json: [{"id", "name", "generation", "member", \
    "members": [{"id", "name", "role", "this_device"}, …]}, …]. 'invalid_state' on a device \
    that belongs to no member. Reads only: it writes nothing on this device (the next 'coven \
    sync' learns what it read). A circle whose chain in storage ends below the generation \
    this device holds (storage lost key generations) is listed as held, with a warning on \
    stderr naming the missing object and "storage_behind" under --json, as 'coven members' \
    gives it.
    """
    static let options = [CommandContext.nulTerminatedOption]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        let circles = try Circles(device).listFresh()
        for loss in circles.compactMap(\.storageBehind) { context.err.write("coven: warning: \(KeyChainLossText.describe(loss))\n") }
        if context.json {
            try context.printJSON(circles.map { circle in
                var object = CircleCommand.json(circle)
                if let loss = circle.storageBehind { object["storage_behind"] = KeyChainLossText.json(loss) }
                return object
            })
        } else {
            let zero = invocation.has("null-terminated")
            for circle in circles {
                let names = circle.members.map { ($0.role == "member" ? $0.name : $0.name + "*") }
                try context.record([circle.id, String(circle.generation), circle.isMember ? "member" : "removed",
                                    zero ? circle.name : DeviceNameText.escape(circle.name),
                                    zero ? names.joined(separator: ",") : names.map(DeviceNameText.escape).joined(separator: ",")], nulTerminated: zero)
            }
        }
        return 0
    }
}
