import CovenKit
import Foundation

/// `coven member`: a person's keys of their own, and this store's members.
struct MemberCommand: Command {
    static let name = "member"
    static let abstract = "make a member's keys; add, remove and adopt the store's members"
    static let synopsis = ["keygen [-o FILE]", "init NAME", "add NAME RECIPIENT [--admin]", "remove MEMBER", "role MEMBER admin|member", "rekey", "use FILE", "export [-o FILE]"]
    static let discussion = """
    A member is a person with keys of their own (DESIGN.md "Members and circles"). 'keygen' \
    makes a new member secret, from which coven derives the member's X25519 key (which receives \
    the store's keys) and Ed25519 key (which vouches for the member's devices), and needs no \
    store and no device. With -o FILE it writes the identity file there (mode 0600, refusing a \
    file that exists: an identity is never overwritten) and prints the member's recipient, \
    'coven1…', on stdout: that line is public, and is what an admin of a store adds. Without \
    -o it prints the identity file itself on stdout (keep it secret: whoever holds it is that \
    member) and the recipient on stderr, as age-keygen does. With --json: {"recipient": \
    "coven1…", "path": FILE} (with -o), or {"recipient", "identity"} without.

    'init NAME' makes this device's store one of members (as 'coven init --member NAME' does \
    for a new store): NAME becomes its first member, the owner, with new keys this device keeps; \
    generation 1 of the store's key is published (the store key every device holds, so nothing \
    changes for them) and this device's entry is vouched for by the member. Refused ('exists') \
    when the store has members already. Prints the member's id and, on stderr, its recipient; \
    --json: {"member", "name", "recipient"}.

    'add NAME RECIPIENT' (an admin's device only: 'not_admin' otherwise) adds the person whose \
    recipient is RECIPIENT (the coven1… line their 'coven member keygen' printed) as NAME, a \
    member, or an admin with --admin: a new generation of the store's key is published, wrapped \
    to every member and to them; their devices then join with 'coven join URL --identity FILE'. \
    A recipient that is a member's already is 'refused'; a name that is a member's already, \
    or differs from one only in case, is 'exists'; a malformed recipient is 'usage' (a line \
    that does not start with coven1, a secret one pasted by mistake, is never echoed). Prints the new member's id; --json: {"member", "name", "role", "generation", \
    "objects_written"}.

    'remove MEMBER' (its name or its id; a name two members share is 'usage') publishes a new \
    generation of the store's key without them, takes them out of every circle this device's \
    member is an admin of (a new generation of each: other circles' admins' devices do the \
    same at their next sync), and marks their devices gone for good: those \
    devices are refused when they sync ('device_gone'), their uploads end, and nothing \
    published after can be read with the keys they hold. Removal is forward only: what they \
    read before stays theirs, and their storage credentials must be revoked by a person. Only \
    an admin removes ('not_admin'); the owner is removed by no other admin, the last admin \
    cannot go, and a member is removed from another member's device ('refused'). --json: \
    {"member", "name", "generation", "devices_gone", "circles", "objects_written"}.

    'role MEMBER admin|member' makes a member an admin of the store, or takes that away: a new \
    generation of the store's key with the role changed. Only an admin changes roles \
    ('not_admin'); the owner's role never changes and the last admin stays one ('refused'); \
    asking for the role a member has already changes nothing. --json: {"member", "name", \
    "role", "generation", "objects_written"}.

    'rekey' replaces the keys of this device's member (their identity was exposed, say): a new \
    identity, then a new generation of the store's key whose roster holds its recipient. This \
    device keeps the new identity; the member's other devices, vouched for by the old key, are \
    gone for good (they join again with the new identity: 'coven member export' writes it). \
    Prints the new recipient; --json: {"member", "recipient", "generation", "devices_gone", \
    "objects_written"}. Run again after a kill, it goes on with the same new identity.

    'use FILE' makes this device one of the member's whose identity FILE holds (a device of a \
    store made before members, which the owner's first device did not make; or a device to hand \
    to another member): the identity is kept here, this device's entry vouched for by it, and \
    the store's keys read with it. 'not_found' when the identity is on no roster of the store.

    'export' writes the identity of this device's member, for joining the member's other \
    devices: with -o FILE to FILE (0600, never over a file), without it on stdout. \
    'invalid_state' on a device that belongs to no member.
    """
    static let options: [OptionSpec] = [
        OptionSpec("output", short: "o", value: "FILE", help: "write the identity file to FILE (mode 0600; never overwritten)", completion: .file),
        OptionSpec("admin", help: "add the member as an admin (add)"),
    ]
    static let arguments = [
        ArgumentSpec("ACTION", help: "what to do", choices: ["keygen", "init", "add", "remove", "role", "rekey", "use", "export"]),
        ArgumentSpec("ARGUMENT", help: "a member's name (init, add), a member (remove, role), an identity file (use)", optional: true),
        ArgumentSpec("RECIPIENT", help: "the new member's recipient, coven1… (add); admin or member (role)", optional: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let action = invocation.arguments.first ?? ""
        let rest = Array(invocation.arguments.dropFirst())
        if invocation.has("admin"), action != "add" { throw CovenError(.usage, "--admin is for add") }
        switch action {
        case "keygen":
            guard rest.isEmpty else {
                throw CovenError(.usage, "'keygen' takes no argument, not '\(rest[0])'", hint: "write the identity to a file with -o FILE")
            }
            let identity = try MemberIdentity()
            try write(identity, invocation, context, recipientOnStdout: true)
        case "init":
            guard let name = rest.first else { throw CovenError(.usage, "missing the NAME of the store's first member") }
            if invocation.value("output") != nil { throw CovenError(.usage, "-o is for keygen and export") }
            let device = try context.openDevice()
            let identity = try Members(device).establish(name: name)
            let id = try Members(device).memberID() ?? ""
            if context.json {
                try context.printJSON(["member": id, "name": name, "recipient": identity.recipient.description])
            } else {
                context.line(id)
                context.note("member '\(name)' (owner) of store \(device.storeID): recipient \(identity.recipient)")
            }
        case "add":
            guard rest.count == 2 else { throw CovenError(.usage, "'add' takes NAME and RECIPIENT", hint: "coven member add bob coven1…") }
            try refuseOutput(invocation)
            let device = try context.openDevice()
            let change = try Members(device).add(name: rest[0], recipient: rest[1], admin: invocation.has("admin"))
            try report(change, context, json: ["role": change.member.role],
                       already: "'\(change.member.name)' is on the roster of generation \(change.generation) of the store's key: added already",
                       done: ["added '\(change.member.name)' (\(change.member.role)) at generation \(change.generation) of the store's key; their devices join with 'coven join URL --identity FILE'"])
        case "remove":
            guard rest.count == 1 else { throw CovenError(.usage, "'remove' takes one MEMBER, its name or its id") }
            try refuseOutput(invocation)
            let device = try context.openDevice()
            let change = try Members(device).remove(rest[0])
            try report(change, context, json: ["devices_gone": change.devicesGone, "circles": change.circles],
                       already: "'\(change.member.name)' is not on the roster of generation \(change.generation) of the store's key: removed already",
                       done: ["removed '\(change.member.name)' at generation \(change.generation) of the store's key; \(change.devicesGone.count.counted("device")) of theirs gone for good; taken out of \(change.circles.count.counted("circle"))",
                              "hint: they keep what they read before, and can still reach the storage: revoke their storage credentials yourself"])
        case "role":
            guard rest.count == 2, ["admin", "member"].contains(rest[1]) else {
                throw CovenError(.usage, "'role' takes a MEMBER and its role, admin or member", hint: "coven member role bob admin")
            }
            try refuseOutput(invocation)
            let device = try context.openDevice()
            let change = try Members(device).setRole(rest[0], admin: rest[1] == "admin")
            let admin = change.member.role != "member"
            try report(change, context, json: ["role": change.member.role],
                       already: "'\(change.member.name)' is \(admin ? "an admin" : "a member who is not an admin") at generation \(change.generation) of the store's key already",
                       done: ["'\(change.member.name)' is \(admin ? "an admin" : "no longer an admin") from generation \(change.generation) of the store's key"])
        case "rekey":
            guard rest.isEmpty else { throw CovenError(.usage, "'rekey' takes no argument, not '\(rest[0])'") }
            try refuseOutput(invocation)
            let device = try context.openDevice()
            let (identity, change) = try Members(device).rekey()
            if context.json {
                try context.printJSON(["member": change.member.id, "recipient": identity.recipient.description, "generation": change.generation,
                                       "devices_gone": change.devicesGone, "objects_written": change.objectsWritten])
            } else {
                context.line(identity.recipient.description)
                context.note("new keys for member '\(change.member.name)' at generation \(change.generation) of the store's key; \(change.devicesGone.count.counted("other device")) of theirs gone for good")
                context.note("hint: join the member's other devices again with the new identity ('coven member export -o FILE' writes it)")
            }
        case "use":
            guard rest.count == 1 else { throw CovenError(.usage, "'use' takes the identity FILE") }
            try refuseOutput(invocation)
            let device = try context.openDevice()
            let member = try Members(device).adopt(identityAt: rest[0])
            if context.json {
                try context.printJSON(["member": member.id, "name": member.name, "role": member.role, "recipient": member.recipient])
            } else {
                context.line(member.id)
                context.note("this device belongs to member '\(member.name)' (\(member.role))")
            }
        case "export":
            guard rest.isEmpty else { throw CovenError(.usage, "'export' takes no argument, not '\(rest[0])'") }
            let device = try context.openDeviceReadOnly()
            try write(try Members(device).identity(), invocation, context, recipientOnStdout: false)
        default:
            throw CovenError(.usage, "ACTION takes 'keygen', 'init', 'add', 'remove', 'role', 'rekey', 'use' or 'export', not '\(action)'")
        }
        return 0
    }

    /// Prints what a roster change did: the member's id, then `done` (or `already`, when it
    /// wrote nothing: a rerun, or nothing to change); with --json one object of the member,
    /// generation and objects written, and `json`.
    private static func report(_ change: Members.RosterChange, _ context: CommandContext, json: [String: Any], already: String, done: [String]) throws {
        if context.json {
            let object: [String: Any] = ["member": change.member.id, "name": change.member.name, "generation": change.generation,
                                         "objects_written": change.objectsWritten]
            try context.printJSON(object.merging(json) { _, extra in extra })
        } else {
            context.line(change.member.id)
            if change.objectsWritten == 0 {
                context.note(already)
            } else {
                for line in done { context.note(line) }
            }
        }
    }

    private static func refuseOutput(_ invocation: Invocation) throws {
        if invocation.value("output") != nil { throw CovenError(.usage, "-o is for keygen and export") }
    }

    /// Writes `identity` to -o FILE (printing its recipient when `recipientOnStdout`), or the
    /// identity itself on stdout.
    private static func write(_ identity: MemberIdentity, _ invocation: Invocation, _ context: CommandContext, recipientOnStdout: Bool) throws {
        let recipient = identity.recipient.description
        if let path = invocation.value("output") {
            try identity.write(to: path)
            if context.json {
                try context.printJSON(["recipient": recipient, "path": path])
            } else if recipientOnStdout {
                context.line(recipient)
            }
        } else if context.json {
            try context.printJSON(["recipient": recipient, "identity": identity.fileText])
        } else {
            context.out.write(identity.fileText)
            context.note("recipient: \(recipient)")
        }
    }
}
