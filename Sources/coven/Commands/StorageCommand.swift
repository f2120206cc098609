import CovenKit
import Foundation

/// `coven storage`: show or change where this device's store is.
struct StorageCommand: Command {
    static let name = "storage"
    static let abstract = "show this device's storage URL, or point it where the store now is"
    static let synopsis = ["[show]", "set URL"]
    static let discussion = """
    'coven storage' or 'coven storage show' prints the storage URL this device syncs with. \
    'coven storage set URL' points the device at URL when the store moved (a NAS mounted \
    elsewhere, a bucket renamed or copied whole): it reads store.json there and refuses a URL \
    where no store is ('missing') or where another store is ('invalid_state', naming both \
    ids), and checks that this device's store key opens the store's manifest there \
    ('integrity'), changing nothing on a refusal; then it records the URL, holding the device \
    lock. Every later command uses it; a running upload worker goes on with the old one until \
    it is started again. Each device of the store is pointed at the new place on its own. \
    Prints the URL; with --json, one object {"storage": URL}.
    """
    static let options: [OptionSpec] = []
    static let arguments = [
        ArgumentSpec("ACTION", help: "show (the default) or set", optional: true, choices: ["show", "set"]),
        ArgumentSpec("URL", help: "the store's new storage URL: file:///DIR or s3://BUCKET/PREFIX", optional: true),
    ]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let action = invocation.arguments.first ?? "show"
        let url: StorageLocation
        switch action {
        case "show":
            guard invocation.arguments.count <= 1 else { throw CovenError(.usage, "show takes no URL", hint: "to change it: coven storage set URL") }
            url = StorageURL(device: try context.openDeviceReadOnly()).current
        case "set":
            guard invocation.arguments.count == 2 else { throw CovenError(.usage, "missing the URL to set", hint: "coven storage set URL") }
            let location = try StorageLocation(parsing: invocation.arguments[1])
            let device = try context.openDevice()
            let before = device.storage
            try StorageURL(device: device).set(location, wait: !context.noWait)
            context.note("device '\(DeviceNameText.escape(device.deviceName))' now syncs with \(location) (was \(before))")
            url = location
        default:
            throw CovenError(.usage, "ACTION takes 'show' or 'set', not '\(action)'")
        }
        if context.json {
            try context.printJSON(["storage": url.description])
        } else {
            context.line(url.description)
        }
        return 0
    }
}
