import CovenKit
import Foundation

/// `coven member keygen`: make a member identity (a person's keys of their own).
struct MemberCommand: Command {
    static let name = "member"
    static let abstract = "make a member's keys (a person with keys of their own)"
    static let synopsis = ["keygen [-o FILE]"]
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
    """
    static let options: [OptionSpec] = [
        OptionSpec("output", short: "o", value: "FILE", help: "write the identity file to FILE (mode 0600; never overwritten)", completion: .file),
    ]
    static let arguments = [ArgumentSpec("ACTION", help: "what to do", choices: ["keygen"])]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard invocation.arguments.first == "keygen" else { throw CovenError(.usage, "the only action is 'keygen'") }
        guard invocation.arguments.count == 1 else {
            throw CovenError(.usage, "'keygen' takes no argument, not '\(invocation.arguments[1])'", hint: "write the identity to a file with -o FILE")
        }
        let identity = try MemberIdentity()
        let recipient = identity.recipient.description
        if let path = invocation.value("output") {
            try identity.write(to: path)
            if context.json {
                try context.printJSON(["recipient": recipient, "path": path])
            } else {
                context.line(recipient)
            }
        } else if context.json {
            try context.printJSON(["recipient": recipient, "identity": identity.fileText])
        } else {
            context.out.write(identity.fileText)
            context.note("recipient: \(recipient)")
        }
        return 0
    }
}
