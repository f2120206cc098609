import CovenKit
import Foundation

/// `coven devices`: the store's devices as this device knows them.
struct DevicesCommand: Command {
    static let name = "devices"
    static let abstract = "list the store's devices, their published seq and frontier"
    static let synopsis = ["[--json] [-z]"]
    static let discussion = """
    One line per device, this one first: its id, the highest seq of its changes applied here \
    (for this device, published), whether it is gone for good, and its name (a control character or backslash in it escaped as \\t, \\n, \\\\ or \\xNN). With -z, four fields a device, each ended by NUL, the name as it is. The list is what \
    the last sync learned from devices/. With --json, an array of objects: `id`, `name`, \
    `joined_at`, `seq`, `frontier` (for each other device, the highest seq it had applied with \
    nothing missing below, as its last change said), `gone`, `this_device`, `clock_ahead_ms` (how far \
    ahead of this device's clock its last change applied here was stamped, when past 5 minutes).
    """
    static let options = [CommandContext.nulTerminatedOption]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDeviceReadOnly()
        let devices = try StoreSync(device).devices()
        if context.json {
            try context.printJSON(devices.map { info -> [String: Any] in
                ["id": info.id, "name": info.name, "joined_at": info.joinedAt, "seq": info.seq, "frontier": info.frontier,
                 "gone": info.gone, "this_device": info.thisDevice, "clock_ahead_ms": info.clockAhead.map { $0 as Any } ?? NSNull()]
            })
        } else {
            for info in devices {
                let zero = invocation.has("null-terminated")
                try context.record([info.id, String(info.seq), info.gone ? "gone" : (info.thisDevice ? "this" : "-"),
                                    zero ? info.name : DeviceNameText.escape(info.name)], nulTerminated: zero)
            }
            for info in devices {
                guard let ahead = info.clockAhead else { continue }
                context.note("warning: device '\(info.name)' (\(info.id)) stamps its changes \(ClockText.duration(ahead)) ahead of this device's clock")
            }
        }
        return 0
    }
}
