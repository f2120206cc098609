import CovenKit
import Foundation

/// `coven device remove`: mark a device gone for good.
struct DeviceCommand: Command {
    static let name = "device"
    static let abstract = "mark a device of the store gone for good"
    static let synopsis = ["remove DEVICE"]
    static let discussion = """
    Publishes devices/<id>.gone, so that no device waits for the removed one any more and it is \
    refused ('device_gone') if it syncs again; its uploads stop there. Of its changes, every \
    device still applies those that some device's published frontier says it applied (so all \
    end with the same rows); the rest are dropped with it. DEVICE is an id or a name \
    that 'coven devices' lists: a name names the device not gone for good that has it (or, if \
    none has, the gone one); a name two devices share is refused ('usage', listing their ids): \
    give the id. This device cannot remove itself. In a store of members, a device of another \
    member is removed only from a device of an admin ('not_admin' otherwise); a mark made \
    anyway is not honoured by the other devices, which report it at each sync. Prints the \
    removed device's id, \
    then one line 'dropped KEY: no device applied it' for each of its published changes no \
    device is known to have applied (above what this device applied of it and what every \
    device's published frontier says): those are dropped with it, and 'coven gc \
    --gone-devices' deletes their objects. A file that was on the removed device only (an \
    upload it never finished) is reported by file-status as 'missing device-removed DEVICE', \
    and reading it fails naming the removed device.
    """
    static let options: [OptionSpec] = []
    static let arguments = [
        ArgumentSpec("ACTION", help: "what to do", choices: ["remove"]),
        ArgumentSpec("DEVICE", help: "the device's id or name"),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard invocation.arguments.first == "remove" else { throw CovenError(.usage, "the only action is 'remove'") }
        guard invocation.arguments.count == 2 else { throw CovenError(.usage, "missing the DEVICE to remove") }
        let device = try context.openDevice()
        let name = invocation.arguments[1]
        let removal = try StoreSync(device).removeDevice(name)
        if context.json {
            try context.printJSON(["removed": removal.id, "dropped_changes": removal.droppedChanges])
        } else {
            context.line(removal.id)
            for key in removal.droppedChanges { context.line("dropped \(key): no device applied it") }
        }
        return 0
    }
}
