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

extension Device {
    /// What keeps an upload's local bytes from being sent, judged cheaply: an original missing
    /// or of another size or time; coven's copy missing, of another size, or written since it
    /// was last checked and now failing its chunk hashes. Nil when the bytes are there.
    func localSourceProblem(_ object: String) -> ErrorCode? {
        guard let row = try? database.queryOne("SELECT * FROM coven_local WHERE object = ?1", [object]) else { return nil }
        let size = row.int("size") ?? 0
        var info = stat()
        if row.string("kind") == FileKind.user.rawValue {
            let path = PathText.string(fromOSBytes: row.bytes("path") ?? [])
            guard PathText.withCString(path, { stat($0, &info) }) == 0 else { return .userFileMissing }
            let now = OriginalIdentity(info)
            guard (info.st_mode & S_IFMT) == S_IFREG, now.size == size, now.modifiedSeconds == row.int("modified_seconds"),
                  now.modifiedNanos == row.int("modified_nanos") else { return .userFileChanged }
            return nil
        }
        let copy = row.string("copy") ?? ""
        let path = paths.folder + "/" + copy
        guard stat(path, &info) == 0, Int64(info.st_size) == size else { return .fileUnavailable }
        if CheckedBytes(self).isStillChecked("copy:" + copy, path: path) { return nil }
        // Written since it was checked (or never checked): its bytes against its chunk hashes.
        let fd = Foundation.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .fileUnavailable }
        defer { Foundation.close(fd) }
        let stamp = FileStamp(path: path)
        let read = LocalRead(fd: fd, size: size, chunkHashes: row.bytes("chunk_hashes") ?? [],
                             changed: { _ in CovenError(.fileUnavailable, "coven's copy fails its check") }, stop: Stop())
        if read.hasChunkHashes {
            guard (try? read.read(0..<size) { _ in }) != nil else { return .fileUnavailable }
        } else {
            let content = row.bytes("content_hash") ?? []
            guard (try? LocalRead.deriveChunkHashes(fd: fd, path: path, size: size, contentHash: content, stop: Stop(),
                                                     changed: { _ in CovenError(.fileUnavailable, "coven's copy fails its check") })) != nil
            else { return .fileUnavailable }
        }
        CheckedBytes(self).recordChecked("copy:" + copy, path: path, stamp: stamp)
        return nil
    }

    /// Judges a file's status as the spec's table says. A stored file is checked with one HEAD
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
        let record = try requireFile(id)
        let object = record.coordinates.object
        switch record.coordinates.at {
        case .device:
            let holder = record.coordinates.device ?? ""
            guard holder == deviceID else {
                return try Reader(self).isGone(holder) ? .missing(device: holder, reason: .deviceRemoved) : .deviceOnly(device: holder)
            }
            guard let row = try database.queryOne("""
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
            if let code = localSourceProblem(object) {
                return .missing(device: holder, reason: .source(code))
            }
            return .uploading
        case .stored:
            if case .s3 = storage {
                let key = environment["AWS_ACCESS_KEY_ID"] ?? ""
                let secret = environment["AWS_SECRET_ACCESS_KEY"] ?? ""
                if key.isEmpty || secret.isEmpty {
                    throw CovenError(.noStorage, "no storage is set up to check file '\(id)'", hint: "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", details: ["file": id])
                }
            }
            let provider: any StorageProvider
            if case .s3 = storage {
                provider = try S3Storage(location: storage, options: options, environment: environment)
            } else {
                provider = try StorageConnector(location: storage, options: options, environment: environment).connect()
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
