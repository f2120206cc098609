import CovenKit
import Foundation

/// `coven member`: a person's keys of their own, and this store's members.
struct MemberCommand: Command {
    static let name = "member"
    static let abstract = "make a member's keys, make a store's first member, export this device's member"
    static let synopsis = ["keygen [-o FILE]", "init NAME", "export [-o FILE]"]
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

    'export' writes the identity of this device's member, for joining the member's other \
    devices: with -o FILE to FILE (0600, never over a file), without it on stdout. \
    'invalid_state' on a device that belongs to no member.
    """
    static let options: [OptionSpec] = [
        OptionSpec("output", short: "o", value: "FILE", help: "write the identity file to FILE (mode 0600; never overwritten)", completion: .file),
    ]
    static let arguments = [
        ArgumentSpec("ACTION", help: "what to do", choices: ["keygen", "init", "export"]),
        ArgumentSpec("NAME", help: "the first member's name (init)", optional: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let action = invocation.arguments.first ?? ""
        let rest = Array(invocation.arguments.dropFirst())
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
        case "export":
            guard rest.isEmpty else { throw CovenError(.usage, "'export' takes no argument, not '\(rest[0])'") }
            let device = try context.openDeviceReadOnly()
            try write(try Members(device).identity(), invocation, context, recipientOnStdout: false)
        default:
            throw CovenError(.usage, "ACTION takes 'keygen', 'init' or 'export', not '\(action)'")
        }
        return 0
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
