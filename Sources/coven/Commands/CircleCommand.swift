import CovenKit
import Foundation

/// `coven circle`: make a circle, and change who is in it.
struct CircleCommand: Command {
    static let name = "circle"
    static let abstract = "make a circle of members; add, remove and rotate its key"
    static let synopsis = ["create NAME [--member MEMBER]...", "add CIRCLE MEMBER [--admin]", "remove CIRCLE MEMBER", "rotate CIRCLE"]
    static let discussion = """
    A circle is an audience smaller than the store (DESIGN.md "Members and circles"): rows whose \
    audience column holds its id (or whose parent's does, through audience_from) and their file \
    records travel in its own section of each change, sealed under its own key, which only its \
    members hold. The store's other members see that such a section exists and check its \
    signature, nothing more: not its rows, not its name, not its roster.

    'create NAME' (any member of the store) makes a circle of this device's member, its first \
    admin, and each --member MEMBER (a name or an id of a store member: 'coven members' lists \
    them): generation 1 of its key is published under a new id, which it prints. This member having a circle of that name already \
    is 'exists'; a member not in the store is 'not_found'. --json: the circle, as 'coven \
    circles --json' gives one, and "objects_written".

    'add CIRCLE MEMBER' (CIRCLE: its name or id) adds a store member, as an admin of the \
    circle with --admin (which also makes a member of it an admin); 'remove CIRCLE MEMBER' takes one out; 'rotate CIRCLE' gives the circle \
    a fresh key with the same members. Each publishes a new generation of the circle's key; \
    only an admin of the circle may ('not_admin'), a member removed from it may not \
    ('not_in_circle'). A removed member keeps what it read, and reads nothing sealed after (its \
    devices' copies and records stay on them); this device's own member and the circle's last \
    admin are not removed ('refused'). Asking for what is already so changes nothing and \
    says so. --json: the circle, "member" (the one added or removed: {"id", "name", "role"}) \
    and "objects_written".

    Removing a member from the store ('coven member remove') removes them from every circle \
    too: the remover's device publishes a new generation without them of each circle its \
    member is an admin of, in the same operation, and the device of any other admin of a \
    circle does the same at its next sync (a circle's generations are published by its admins \
    only). What is written in a circle after that is sealed under a key the removed member \
    never held. Writes a device made before it learned of a removal (sealed under a generation \
    its member was on) are accepted, as the store's are.

    A row goes into a circle by a write setting its audience column to the circle's id, \
    which only a member of the circle may ('not_in_circle'): \
    coven write "UPDATE albums SET audience = :c WHERE id = :a" --param c=ID --param a=ALBUM. \
    It comes out of the circle only by a member's write too: a store member outside the circle \
    who knew the row's id from before it moved there cannot write it back into the store (its \
    own device refuses, 'not_in_circle'; every member's device refuses the entry as \
    'not_authorized', a lost value 'coven sync' counts), unless its write crossed the move (its \
    device had not applied it), which last writer wins decides as any concurrent edit.
    """
    static let options: [OptionSpec] = [
        OptionSpec("member", value: "MEMBER", help: "a member of the new circle, by name or id (create; repeatable)", repeatable: true),
        OptionSpec("admin", help: "add the member as an admin of the circle, or make a member of it one (add)"),
    ]
    static let arguments = [
        ArgumentSpec("ACTION", help: "what to do", choices: ["create", "add", "remove", "rotate"]),
        ArgumentSpec("CIRCLE", help: "the new circle's name (create), or a circle's name or id", optional: true),
        ArgumentSpec("MEMBER", help: "a member of the store, by name or id (add, remove)", optional: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let action = invocation.arguments.first ?? ""
        let rest = Array(invocation.arguments.dropFirst())
        let members = invocation.values("member")
        if action != "add", invocation.has("admin") { throw CovenError(.usage, "--admin is for add") }
        if action != "create", !members.isEmpty { throw CovenError(.usage, "--member is for create", hint: "add a member to a circle with 'coven circle add CIRCLE MEMBER'") }
        switch action {
        case "create":
            guard rest.count == 1 else { throw CovenError(.usage, "'create' takes the circle's NAME", hint: "coven circle create couple --member bob") }
            let device = try context.openDevice()
            let change = try Circles(device).create(name: rest[0], members: members)
            try report(change, context, done: ["circle '\(change.circle.name)' of \(change.circle.members.map(\.name).joined(separator: ", ")) at generation 1 of its key"])
        case "add":
            guard rest.count == 2 else { throw CovenError(.usage, "'add' takes a CIRCLE and a MEMBER", hint: "coven circle add couple carol [--admin]") }
            let device = try context.openDevice()
            let change = try Circles(device).add(rest[0], member: rest[1], admin: invocation.has("admin"))
            let who = change.member?.name ?? rest[1]
            try report(change, context, already: "'\(who)' is in circle '\(change.circle.name)' at generation \(change.circle.generation) already",
                       done: ["added '\(who)' to circle '\(change.circle.name)' at generation \(change.circle.generation) of its key"])
        case "remove":
            guard rest.count == 2 else { throw CovenError(.usage, "'remove' takes a CIRCLE and a MEMBER") }
            let device = try context.openDevice()
            let change = try Circles(device).remove(rest[0], member: rest[1])
            let who = change.member?.name ?? rest[1]
            try report(change, context, already: "'\(who)' is not in circle '\(change.circle.name)' at generation \(change.circle.generation): removed already",
                       done: ["removed '\(who)' from circle '\(change.circle.name)' at generation \(change.circle.generation) of its key",
                              "hint: they keep what they read before; nothing sealed from now on opens with their keys"])
        case "rotate":
            guard rest.count == 1 else { throw CovenError(.usage, "'rotate' takes one CIRCLE") }
            let device = try context.openDevice()
            let change = try Circles(device).rotate(rest[0])
            try report(change, context, done: ["circle '\(change.circle.name)' has a new key: generation \(change.circle.generation)"])
        default:
            throw CovenError(.usage, "ACTION takes 'create', 'add', 'remove' or 'rotate', not '\(action)'")
        }
        return 0
    }

    /// A circle as --json gives it.
    static func json(_ circle: Circles.Circle) -> [String: Any] {
        ["id": circle.id, "name": circle.name, "generation": circle.generation, "member": circle.isMember,
         "members": circle.members.map { ["id": $0.id, "name": $0.name, "role": $0.role, "this_device": $0.isThisDevicesMember] }]
    }

    /// Prints the circle's id, then `done` (or `already` when nothing was written).
    private static func report(_ change: Circles.Change, _ context: CommandContext, already: String = "", done: [String]) throws {
        if context.json {
            var object = json(change.circle)
            object["objects_written"] = change.objectsWritten
            if let member = change.member { object["member"] = ["id": member.id, "name": member.name, "role": member.role] }
            try context.printJSON(object)
        } else {
            context.line(change.circle.id)
            if change.objectsWritten == 0 {
                context.note(already)
            } else {
                for line in done { context.note(line) }
            }
        }
    }
}
