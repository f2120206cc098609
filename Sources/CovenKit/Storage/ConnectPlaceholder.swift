import Foundation

// Placeholder until the storage branch lands: enough of file:// for `init`. Deleted at merge.
extension StorageConnector {
    public func connect() throws -> StorageProvider {
        guard case .file(let directory) = location else { throw CovenError(.noStorage, "s3 is not connected yet") }
        return PlaceholderFileStorage(directory: directory)
    }
}

final class PlaceholderFileStorage: StorageProvider {
    let directory: String
    init(directory: String) { self.directory = directory }
    var singleRequestLimit: Int64 { .max }
    var minimumPartSize: Int64 { 1 }
    func put(_ key: String, data: [UInt8]) throws {
        try FileManager.default.createDirectory(atPath: ((directory + "/" + key) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try AtomicFile.write(directory + "/" + key, bytes: data)
    }
    func putIfAbsent(_ key: String, data: [UInt8]) throws -> Bool {
        if try head(key) != nil { return false }
        try put(key, data: data)
        return true
    }
    func get(_ key: String, range: Range<Int64>?, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int64? { throw CovenError(.noStorage, "placeholder") }
    func head(_ key: String) throws -> ObjectInfo? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: directory + "/" + key) else { return nil }
        return ObjectInfo(key: key, size: (attributes[.size] as? Int64) ?? 0)
    }
    func delete(_ key: String) throws {}
    func list(prefix: String) throws -> [ObjectInfo] { [] }
    func createMultipart(_ key: String, totalSize: Int64, partSize: Int64) throws -> String { throw CovenError(.noStorage, "placeholder") }
    func uploadPart(_ key: String, uploadID: String, number: Int, offset: Int64, data: UnsafeRawBufferPointer) throws -> UploadedPart { throw CovenError(.noStorage, "placeholder") }
    func listParts(_ key: String, uploadID: String) throws -> [UploadedPart] { [] }
    func completeMultipart(_ key: String, uploadID: String, parts: [UploadedPart]) throws {}
    func abortMultipart(_ key: String, uploadID: String) throws {}
}
