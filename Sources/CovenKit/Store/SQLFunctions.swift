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
        // coven_stored_coordinates(coordinates): a file's coordinates once its bytes are stored
        // (the same object and key, on no device), as coven writes them.
        try database.createFunction("coven_stored_coordinates", arguments: 1, deterministic: true) { args in
            guard let text = args[0].textValue else { return .null }
            let coordinates = try Coordinates(json: text)
            return .text(Coordinates(at: .stored, device: nil, object: coordinates.object, key: coordinates.key).json)
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
        // coven_kept(table, id): 1 when the row would leave this device at the next push (its
        // kept predicate, Store/SchemaGraph.swift), 0 when it stays here, NULL for no such row.
        let kept = KeptLookup(device: device)
        try database.createFunction("coven_kept", arguments: 2, deterministic: false) { args in
            guard let table = args[0].textValue else {
                throw CovenError(.usage, "coven_kept(table, id) takes a table name")
            }
            guard let id = args[1].textValue else { return .null }
            return try kept.isKept(table: table, id: id).map { .integer($0 ? 1 : 0) } ?? .null
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

/// `coven_kept()`'s answers, from the kept rule of ``RowAudiences`` built once per connection on
/// first use.
private final class KeptLookup {
    unowned let device: Device
    private var audiences: RowAudiences?

    init(device: Device) { self.device = device }

    func isKept(table: String, id: String) throws -> Bool? {
        guard table == "coven_files" || device.manifest.table(table) != nil else {
            throw CovenError(.usage, "coven_kept(): '\(table)' is not a synced table", hint: "the manifest's tables and coven_files have a kept rule")
        }
        let audiences = try audiences ?? RowAudiences(device: device)
        self.audiences = audiences
        return try audiences.isKept(table: table, id: id)
    }
}
