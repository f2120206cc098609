import Foundation

/// coven's SQL functions that every connection has (reads included). The write functions
/// (`coven_put_staged`, …) are added by ``WriteSession`` for the length of one write.
enum SQLFunctions {
    static func install(on device: Device) throws {
        let database = device.database
        // coven_file_device(coordinates): the device a file is on while it is on one device
        // only, NULL once it is stored.
        try database.createFunction("coven_file_device", arguments: 1, deterministic: true) { args in
            guard let text = args[0].textValue, let coordinates = try? Coordinates(json: text) else { return .null }
            return coordinates.at == .device ? .text(coordinates.device ?? "") : .null
        }
        // coven_path_text(path): path bytes as text for people.
        try database.createFunction("coven_path_text", arguments: 1, deterministic: true) { args in
            guard let bytes = args[0].bytesValue else { return .null }
            return .text(PathText.text(bytes))
        }
        try database.createFunction("coven_uuid7", arguments: 0, deterministic: false) { _ in
            .text(Identifier.uuid7())
        }
        try database.createFunction("coven_uuid4", arguments: 0, deterministic: false) { _ in
            .text(Identifier.uuid4())
        }
        let deviceID = device.deviceID
        try database.createFunction("coven_device_id", arguments: 0, deterministic: true) { _ in
            .text(deviceID)
        }
        // Outside a write these refuse, naming the command that has them.
        for (name, count) in [("coven_put_user_file", -1), ("coven_put_staged", 1), ("coven_existing_file", 1),
                              ("coven_move_to_cloud", -1), ("coven_cancel_move", 1), ("coven_stamp", 0)] {
            try database.createFunction(name, arguments: Int32(count), deterministic: false) { _ in
                throw CovenError(.usage, "\(name)() works only inside 'coven write'")
            }
        }
    }
}
