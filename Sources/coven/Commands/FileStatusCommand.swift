import CovenKit
import Foundation

/// `coven file-status`: whether a file can be read, and from where.
struct FileStatusCommand: Command {
    static let name = "file-status"
    static let abstract = "say whether a file is available, uploading, on one device only or missing"
    static let synopsis = ["FILE [--json]"]
    static let discussion = """
    Prints one of: available (storage holds an object of the file's complete encrypted size); \
    uploading (on this device only, its upload queued here); device-only DEVICE (on one device \
    only, with no upload); missing lost (storage confirms nothing at the file's path); missing \
    source CODE (uploading from this device, and its original is missing, user_file_missing, or \
    coven's copy fails its check, file_unavailable); missing device-removed DEVICE (it was on \
    that device only, which 'coven device remove' removed: its bytes went with it). A stored file is checked with one request \
    for its object's size; one on a device only needs none. An object of any other size is \
    damage (integrity), a network or permission failure an error (storage), never absence; \
    with no storage set up (no credentials) it is no_storage. With --json, one object.
    """
    static let arguments = [ArgumentSpec("FILE", help: "the file id", completion: .fileID)]
    static let options: [OptionSpec] = []
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        guard let file = invocation.arguments.first else { throw CovenError(.usage, "missing FILE") }
        let device = try context.openDeviceReadOnly()
        let status = try Uploads(device).fileStatus(file, environment: context.environment, options: StorageOptions(environment: context.environment))
        var object: [String: Any] = ["file": file, "device": NSNull(), "this_device": NSNull(), "reason": NSNull(), "source_error": NSNull()]
        let text: String
        switch status {
        case .available:
            object["status"] = "available"
            text = "available"
        case .uploading:
            object["status"] = "uploading"
            text = "uploading"
        case .deviceOnly(let holder):
            object["status"] = "device_only"
            object["device"] = holder
            object["this_device"] = holder == device.deviceID
            text = "device-only \(holder)"
        case .missing(let holder, .lost):
            object["status"] = "missing"
            object["reason"] = "lost"
            object["device"] = holder.map { $0 as Any } ?? NSNull()
            object["this_device"] = holder.map { ($0 == device.deviceID) as Any } ?? NSNull()
            text = "missing lost"
        case .missing(let holder, .deviceRemoved):
            object["status"] = "missing"
            object["reason"] = "device_removed"
            object["device"] = holder.map { $0 as Any } ?? NSNull()
            object["this_device"] = false
            text = "missing device-removed \(holder ?? "")"
        case .missing(let holder, .source(let code)):
            object["status"] = "missing"
            object["reason"] = "source"
            object["source_error"] = code.rawValue
            object["device"] = holder.map { $0 as Any } ?? NSNull()
            object["this_device"] = holder.map { ($0 == device.deviceID) as Any } ?? NSNull()
            text = "missing source \(code.rawValue)"
        }
        if context.json {
            try context.printJSON(object)
        } else {
            context.line(text)
        }
        return 0
    }
}
