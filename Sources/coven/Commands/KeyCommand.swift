import CovenKit
import Foundation

/// `coven key export`: print the store key, for joining devices.
struct KeyCommand: Command {
    static let name = "key"
    static let abstract = "print the store key for joining another device"
    static let synopsis = ["export"]
    static let discussion = """
    Prints one line, 'coven-store-key-v1:STORE:KEY' (KEY is 64 hex digits), on stdout and \
    nowhere else. Whoever holds it can read everything in the store: keep it like a password. \
    In a store of members (the default since members; see coven-member(1)) a device holds no \
    one key of the whole store: the line printed is then the identity of this device's member, \
    'COVEN-MEMBER-SECRET-1…' (as 'coven member export' writes it), and 'coven join URL \
    --key-file FILE' joins the member's other devices with it, as --identity does.
    """
    static let options: [OptionSpec] = []
    static let arguments = [ArgumentSpec("ACTION", help: "what to do with the key", choices: ["export"])]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        if try Members(device).memberID() != nil {
            let identity = try Members(device).identity()
            if context.json {
                try context.printJSON(["store": device.storeID, "key": identity.secretLine, "member": try Members(device).memberID() ?? ""])
            } else {
                context.line(identity.secretLine)
            }
            return 0
        }
        let key = try device.keys.storeKeyBytes()
        let text = "coven-store-key-v1:\(device.storeID):\(key.hex)"
        if context.json {
            try context.printJSON(["store": device.storeID, "key": text])
        } else {
            context.line(text)
        }
        return 0
    }
}
