import Foundation

/// What interrupted uploads of this device and devices gone for good left in storage.
extension Collector {
    // MARK: Leftovers of interrupted uploads

    /// How old a leftover must be to go: a day.
    static let leftoverAge: TimeInterval = 86400

    /// The setting holding when leftovers were last looked for.
    static let leftoversSetting = "gc_leftovers_at"

    /// The leftovers of this device's interrupted writes, looked for at most once per `age` (a
    /// dry run looks every time)
    /// (one listing of this device's folders and of its unfinished uploads): temporary files
    /// a kill left in `files/<this device>/` and `changes/<this device>/` (file://), removed
    /// once older than `age` while no upload of this device is being sent; and multipart
    /// sessions under `files/<this device>/` started more than `age` ago for an object no
    /// queued upload names (a start whose answer was lost: nothing else will abort them; a
    /// queued upload's own sessions are the upload worker's to end).
    mutating func collectLeftovers(into report: inout GCReport, age: TimeInterval) throws {
        let now = Date()
        if !dryRun, let last = try device.setting(Self.leftoversSetting).flatMap(Double.init), now.timeIntervalSince1970 - last < age, last <= now.timeIntervalSince1970 {
            return
        }
        let before = now.addingTimeInterval(-age)
        let queue = device.uploadQueue
        // A temporary file of a write running now is fresh; one of an upload being sent now is
        // left to a later pass whatever its age.
        if try !queue.isSending(at: now.timeIntervalSince1970) {
            for prefix in ["files/\(me)/", "changes/\(me)/"] {
                for leftover in try provider.leftoverTemporaries(prefix: prefix) where leftover.modified <= before {
                    if !dryRun {
                        do {
                            try provider.removeLeftoverTemporary(leftover.key)
                        } catch let error as CovenError {
                            let reason: GCReport.KeepReason = error.storageFailure == .denied ? .refused : .failed
                            report.kept.append(.init(key: leftover.key, kind: .temporary, reason: reason, detail: error.message))
                            continue
                        }
                    }
                    report.deleted.append(.init(key: leftover.key, kind: .temporary))
                }
            }
        }
        // Listed before the queue is read: a session listed was started after its upload was
        // queued, so a queue without it means that upload is over.
        let sessions: [UploadInProgress]
        do {
            sessions = try provider.uploadsInProgress(prefix: "files/\(me)/")
        } catch let error as CovenError where error.storageFailure == .denied {
            // Credentials without the right to list unfinished uploads: said, and the rest goes on.
            report.kept.append(.init(key: "files/\(me)/", kind: .file, reason: .refused, detail: "its unfinished uploads cannot be listed: " + error.message))
            if !dryRun { try device.setSetting(Self.leftoversSetting, String(now.timeIntervalSince1970)) }
            return
        }
        for upload in sessions where (upload.initiated ?? now) <= before {
            if try queue.contains(upload.key) { continue }
            if !dryRun { try provider.abortMultipart(upload.key, uploadID: upload.uploadID) }
            report.abortedUploads.append(upload.key)
        }
        if !dryRun { try device.setSetting(Self.leftoversSetting, String(now.timeIntervalSince1970)) }
    }

    // MARK: Gone devices

    /// For each device gone for good: delete its published changes no device applied (one
    /// listing of its changes), abort its unfinished uploads, list its folder once and delete
    /// what nothing names.
    mutating func collectGoneDevices(into report: inout GCReport, stop: Stop) throws {
        // Changes this device cannot read yet (sealed under a key generation it does not hold)
        // may name a gone device's bytes, and the frontiers that would say so: keep them all.
        let waiting = try StoreSync(device).keyUnavailable()
        for goneDevice in gone.sorted() {
            try stop.check("gc")
            if !waiting.isEmpty {
                report.kept.append(.init(key: "files/\(goneDevice)/", kind: .file, reason: .deviceBehind, devices: waiting.keys.sorted(),
                                         detail: "this device cannot read their changes yet: sealed under a key generation it does not hold"))
                continue
            }
            // Its published changes no device applied: every device dropped them with it.
            try delete(try StoreSync(device).droppedChanges(of: goneDevice, provider: provider), kind: .change, into: &report) { _ in }
            let folder = "files/\(goneDevice)/"
            // What other devices applied of it, this device must have applied too (pull no longer
            // reads a gone device's changes): else a record naming its bytes may be missing here.
            let ahead = others.filter { ($0.frontier[goneDevice] ?? 0) > (applied[goneDevice] ?? 0) }.map(\.id)
            if !ahead.isEmpty {
                report.kept.append(.init(key: folder, kind: .file, reason: .deviceBehind, devices: ahead.sorted(),
                                         detail: "they applied changes of gone device \(goneDevice) that this device has not"))
                continue
            }
            for upload in try provider.uploadsInProgress(prefix: folder) {
                if !dryRun { try provider.abortMultipart(upload.key, uploadID: upload.uploadID) }
                report.abortedUploads.append(upload.key)
            }
            var deletable: [String] = []
            let trash = Trash(device)
            for info in try provider.list(prefix: folder) {
                let object = info.key
                if try !device.fileRecords.ids(object: object).isEmpty { continue }
                let rows = try device.candidates.naming(object)
                if rows.contains(where: { $0.device == me }) { continue }  // this device's own: collectFiles judges it
                var hold: (GCReport.KeepReason, [String], String?)?
                let files = rows.flatMap(\.files)
                if rows.isEmpty {
                    hold = try holdBack(object: object, files: [], writer: me, seq: 0)
                }
                for row in rows where hold == nil {
                    hold = try holdBack(object: object, files: files, writer: row.device, seq: row.seq ?? Int64.max)
                }
                if try keeps(object, hold: hold, trash: trash, into: &report) { continue }
                deletable.append(object)
            }
            try delete(deletable, kind: .file, into: &report) { object in
                try device.candidates.removeAll(object: object)
                try device.fileRecords.forgetDeleted(object: object)
            }
        }
    }
}
