import Foundation

/// Whether a file can be read and from where: spec/files.md, "File status".
public enum FileStatus: Sendable, Equatable {
    /// Why a file is missing.
    public enum MissingReason: Sendable, Equatable {
        /// Storage confirms nothing at the path the record names: the provider lost it.
        case lost
        /// The file is on this device only, uploading, and its source is missing or coven's
        /// copy fails its check (the error's code: `user_file_missing`, `file_unavailable`).
        case source(ErrorCode)
        /// The file was on one device only, and that device was removed from the store for
        /// good (`coven device remove`): its bytes went with it.
        case deviceRemoved
    }

    /// Storage holds an object of the file's complete encrypted size.
    case available
    /// The file is on this device only, while its upload is queued here.
    case uploading
    /// The file is on one device only, with no upload.
    case deviceOnly(device: String)
    /// The file is missing.
    case missing(device: String?, reason: MissingReason)
}

extension Uploads {    /// Judges a file's status as the spec's table says. A stored file is checked with one HEAD
    /// of its object; a file on one device only needs no storage request.
    ///
    /// - Parameters:
    ///   - id: the file id.
    ///   - connector: how to reach storage (the device's location by default).
    /// - Returns: the status.
    /// - Throws: `.fileAbsent` when this device has no record of the file; `.noStorage` when
    ///   the file is stored and no storage is set up (S3 without credentials); `.integrity`
    ///   when the object has another size than the file's encrypted size; `.storage` for a
    ///   network or permission failure (never taken for absence).
    public func fileStatus(_ id: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                           options: StorageOptions = StorageOptions()) throws -> FileStatus {
        let record = try device.requireFile(id)
        let object = record.coordinates.object
        switch record.coordinates.at {
        case .device:
            let holder = record.coordinates.device ?? ""
            guard holder == device.deviceID else {
                return try Reader(device).isGone(holder) ? .missing(device: holder, reason: .deviceRemoved) : .deviceOnly(device: holder)
            }
            guard let row = try device.database.queryOne("""
                SELECT q.state, q.last_error_code, m.state AS move_state FROM coven_upload_queue q
                LEFT JOIN coven_move_state m ON m.id = q.move WHERE q.object = ?1
                """, [object]) else { return .deviceOnly(device: holder) }
            let moveState = row.string("move_state").flatMap(MoveState.init(rawValue:))
            if row.string("state") == UploadState.retired.rawValue || moveState == .failed || moveState == .cancelled {
                return .deviceOnly(device: holder)
            }
            if let code = row.string("last_error_code").flatMap(ErrorCode.init(rawValue:)),
               code == .userFileMissing || code == .fileUnavailable {
                return .missing(device: holder, reason: .source(code))
            }
            // The source this status reports on, as it is now, not as the last attempt found it.
            if let code = CheckedBytes(device).localSourceProblem(object) {
                return .missing(device: holder, reason: .source(code))
            }
            return .uploading
        case .stored:
            if case .s3 = device.storage {
                let key = environment["AWS_ACCESS_KEY_ID"] ?? ""
                let secret = environment["AWS_SECRET_ACCESS_KEY"] ?? ""
                if key.isEmpty || secret.isEmpty {
                    throw CovenError(.noStorage, "no storage is set up to check file '\(id)'", hint: "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", details: ["file": id])
                }
            }
            let provider: any StorageProvider
            if case .s3 = device.storage {
                provider = try S3Storage(location: device.storage, options: options, environment: environment)
            } else {
                provider = try StorageConnector(location: device.storage, options: options, environment: environment).connect()
            }
            guard let info = try provider.head(object) else {
                return .missing(device: nil, reason: .lost)
            }
            let expected = ObjectLayout.encryptedSize(plaintextSize: record.size)
            guard info.size == expected else {
                throw CovenError(.integrity, "the stored object of file '\(id)' is \(info.size.counted("byte")), not \(expected)", details: ["file": id, "object": object])
            }
            return .available
        }
    }
}
