import CovenKit
import Foundation

/// `coven members`: the store's members, as the newest key generation this device reads says.
struct MembersCommand: Command {
    static let name = "members"
    static let abstract = "list the store's members and their roles"
    static let synopsis = ["[--json] [-z]"]
    static let discussion = """
    One line per member of the store, from the newest generation of the store's key this \
    device's member reads (read from storage, every link of the chain checked): its id, its \
    role (owner, admin or member), 'this' for the member this device belongs to or '-', its name \
    (a control character or backslash escaped as \\t, \\n, \\\\ or \\xNN), and its recipient \
    (coven1…). With -z, five fields a member, each ended by NUL, the name as it is. With --json: \
    {"generation": N, "members": [{"id", "name", "role", "recipient", "this_device", \
    "devices"}, …]}, devices counting the member's devices not gone for good that this device knows. \
    Reads only: it writes nothing on this device (the next 'coven sync' learns what it read). \
    When storage's chain ends below the generation this device holds (storage lost key \
    generations: a backup put back), it lists the roster held here, warns on stderr naming \
    the missing object, and adds "storage_behind": {"audience", "object", \
    "storage_generation", "held_generation"} under --json. \
    'invalid_state' on a device that belongs to no member (a store made before members: \
    'coven member init NAME' makes its first); 'integrity' naming the object for a forged or \
    damaged generation.
    """
    static let options = [CommandContext.nulTerminatedOption]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        let roster = try Members(device).roster()
        if let loss = roster.storageBehind { context.err.write("coven: warning: \(KeyChainLossText.describe(loss))\n") }
        if context.json {
            var object: [String: Any] = ["generation": roster.generation, "members": roster.members.map { member -> [String: Any] in
                ["id": member.id, "name": member.name, "role": member.role, "recipient": member.recipient, "this_device": member.isThisDevicesMember,
                 "devices": member.devices]
            }]
            if let loss = roster.storageBehind { object["storage_behind"] = KeyChainLossText.json(loss) }
            try context.printJSON(object)
        } else {
            let zero = invocation.has("null-terminated")
            for member in roster.members {
                try context.record([member.id, member.role, member.isThisDevicesMember ? "this" : "-",
                                    zero ? member.name : DeviceNameText.escape(member.name), member.recipient], nulTerminated: zero)
            }
        }
        return 0
    }
}
