import Foundation

/// What `coven sync` did: push, pull, push.
public struct SyncReport: Sendable, Equatable {
    public var pushed = PushReport()
    public var pulled = PullReport()
    /// Nothing was published or applied (a device learned of or not), nothing of this
    /// device's own history was caught up on or published again, nothing was lost for good.
    public var quiet: Bool {
        pushed.published.isEmpty && pulled.changes == 0 && pushed.caughtUp.isEmpty && pushed.republished.isEmpty && pulled.lostForGood.isEmpty
    }
}

/// Where a sync is, for a progress line: a change published or applied.
public enum SyncProgress: Sendable {
    case published(seq: Int64, entries: Int)
    case applied(device: String, seq: Int64, entries: Int)
}

/// What `coven device remove` did.
public struct DeviceRemoval: Sendable, Equatable {
    /// The device removed, and its name.
    public var id: String
    public var name: String
    /// The keys of its published changes no device is known to have applied: dropped with it.
    public var droppedChanges: [String]
}

/// One device of the store, as this device knows it.
public struct DeviceInfo: Sendable, Equatable {
    public var id: String
    public var name: String
    public var joinedAt: String
    /// The highest seq applied here (for this device: published).
    public var seq: Int64
    public var frontier: [String: Int64]
    public var gone: Bool
    public var thisDevice: Bool
    /// How far its last change applied here was stamped ahead of this device's wall clock,
    /// in milliseconds, when past ``HybridClock/maximumAhead``: its clock runs ahead.
    public var clockAhead: Int64?
}

/// A lost value of a concurrent edit, or a row taken out.
public struct LostValue: Sendable, Equatable {
    public var id: Int64
    public var table: String
    public var rowID: String
    public var values: [String: SQLValue]
    public var columns: [String]
    public var stamp: String
    public var device: String
    public var winnerStamp: String?
    public var lostAt: String
    public var why: String
    public var restoredAt: String?
    /// Only the losing side of a concurrent edit can be restored; a take-out cannot.
    public var restorable: Bool { why == "concurrent" }
}

extension StoreSync {
    /// Publishes this device's writes and applies the other devices' (`push`, `pull`, or push,
    /// pull, push), under the device lock.
    public func sync(push: Bool = true, pull: Bool = true, wait: Bool = true, stop: Stop = Stop(),
                     progress: ((SyncProgress) -> Void)? = nil) throws -> SyncReport {
        let lock = try device.lock(wait: wait)
        defer { _ = lock }
        let cache = try PageCache(database: database)
        defer { cache.restore() }
        return try connected().syncLocked(push: push, pull: pull, stop: stop, progress: progress)
    }

    /// ``sync(push:pull:wait:stop:progress:)`` under the caller's lock, through the storage this
    /// sync holds (connected once by ``connected()``).
    func syncLocked(push: Bool = true, pull: Bool = true, stop: Stop = Stop(),
                    progress: ((SyncProgress) -> Void)? = nil) throws -> SyncReport {
        let provider = try storage()
        // A missing or damaged store key stops a sync before anything else.
        _ = try keys.storeKey()
        var report = SyncReport()
        // A device removed for good publishes nothing more.
        let learned = try DeviceRegistry(device).refresh(provider: provider)
        // New generations of the store's key (a member added or removed), read with this
        // device's member identity: one listing when there are none.
        try Members(device).refresh(provider: provider, retire: !learned.isEmpty)
        // And of the circles: one listing of audiences/. A member removed from the store
        // leaves the circles this device's member is an admin of (a removal another admin
        // made, or one stopped half-way).
        try Circles(device).refresh(provider: provider)
        try Circles(device).dropRemovedMembers(provider: provider)
        if push { try ensureSigningKey() }
        if push { report.pushed = try self.push(stop: stop, progress: progress) }
        if pull {
            report.pulled = try self.pull(stop: stop, learned: learned, progress: progress)
            // Circles' sections of earlier changes that a key learned now opens: from the
            // newest part of a snapshot for the circle, then the changes past it.
            let authorizer = MemberAuthorizer(keys: keys, database: database, store: storeID, manifest: manifest, audiences: try RowAudiences(device: device))
            let parts = try SnapshotParts(device: device).reopen(provider: provider, authorizer: authorizer, stop: stop)
            let backfill = try CircleSections(database: database).backfill(device: device, provider: provider, authorizer: authorizer, stop: stop)
            report.pulled.reopenedSections = backfill.sections + parts.sections
            report.pulled.reopenedParts = parts.parts
            report.pulled.reopenUnavailable = backfill.unavailable.merging(parts.unavailable) { first, _ in first }
        }
        if push && pull {
            let again = try self.push(stop: stop, checkHistory: false, progress: progress)
            report.pushed.published += again.published
            report.pushed.entries += again.entries
            report.pushed.rows += again.rows
            report.pushed.fileRecords += again.fileRecords
            report.pushed.held = again.held
        }
        // What was published left free pages: give them back (a failure here loses nothing).
        if push { _ = try? FreePages(database: database).reclaim() }
        return report
    }

    /// Every device of the store this device knows of, this one first.
    public func devices() throws -> [DeviceInfo] {
        try database.query("SELECT * FROM coven_device_registry ORDER BY device <> ?1, joined_at, device", [deviceID]).map { row in
            DeviceInfo(id: row.string("device") ?? "", name: row.string("name") ?? "", joinedAt: row.string("joined_at") ?? "",
                       seq: row.int("applied_seq") ?? 0, frontier: Frontier.parse(row.string("frontier") ?? "{}"),
                       gone: row.int("gone") == 1, thisDevice: row.string("device") == deviceID,
                       clockAhead: try HybridClock.ahead(of: row.string("device") ?? "", in: database))
        }
    }

    /// Marks `device` gone for good: publishes `devices/<id>.gone`, so every device stops
    /// waiting for it and it is refused if it syncs again.
    ///
    /// `device` is an id, or a name: that of one device not gone for good, or, when no live
    /// device has it, of one gone device.
    ///
    /// - Returns: the device removed and its published changes no device is known to have
    ///   applied, which every device drops with it (`coven gc --gone-devices` deletes them).
    /// - Throws: `.notFound` for a device the store does not have; `.usage` for a name two
    ///   devices share (the error lists their ids); `.invalidState` for this device.
    @discardableResult
    public func removeDevice(_ device: String) throws -> DeviceRemoval {
        let lock = try self.device.lock(wait: true)
        defer { _ = lock }
        let provider = try storage()
        _ = try keys.storeKey()
        try DeviceRegistry(self.device).refresh(provider: provider)
        let id: String
        if try database.queryOne("SELECT device FROM coven_device_registry WHERE device = ?1", [device]) != nil {
            id = device
        } else {
            let named = try database.query("SELECT device, gone FROM coven_device_registry WHERE name = ?1 ORDER BY device", [device])
            let live = named.filter { $0.int("gone") != 1 }
            let candidates = (live.isEmpty ? named : live).compactMap { $0.string("device") }
            guard let first = candidates.first else {
                throw CovenError(.notFound, "no device '\(device)' in this store", hint: "'coven devices' lists them", details: ["device": device])
            }
            guard candidates.count == 1 else {
                throw CovenError(.usage, "\(candidates.count) devices are called '\(DeviceNameText.escape(device))': \(candidates.joined(separator: ", "))",
                                 hint: "name the one to remove by its id ('coven devices' lists them)",
                                 details: ["device": device, "devices": candidates.joined(separator: ",")])
            }
            id = first
        }
        guard id != deviceID else {
            throw CovenError(.invalidState, "'\(device)' is this device", hint: "remove a device from another one", details: ["device": id])
        }
        // In a store of members, only an admin's device removes another member's device.
        if let generation = try keys.storeGeneration() {
            let authority = RemovalAuthority(keys: keys, database: database, store: storeID)
            let roster = try keys.roster(audience: RowAudiences.store, generation: generation)
            if let target = try authority.vouchedMember(id, roster: roster) {
                let mine = try authority.vouchedMember(deviceID, roster: roster)
                guard let mine, mine.role.isAdmin || mine.id == target.id else {
                    throw CovenError(.notAdmin, "device '\(device)' belongs to member '\(target.name)', and this device's member is not an admin",
                                     hint: "remove it from a device of an admin, or of '\(target.name)'", details: ["device": id, "member": target.id])
                }
            }
        }
        return try StoreSync(self.device, storage: provider).markGone(id)
    }

    /// Publishes `devices/<id>.gone` for a device of the registry and records it gone here
    /// (``removeDevice(_:)``, and `coven member remove` for each device of the member), under
    /// the caller's lock.
    func markGone(_ id: String) throws -> DeviceRemoval {
        guard let row = try database.queryOne("SELECT * FROM coven_device_registry WHERE device = ?1", [id]) else {
            throw CovenError(.notFound, "no device '\(id)' in this store", hint: "'coven devices' lists them", details: ["device": id])
        }
        let provider = try storage()
        let dropped = try droppedChanges(of: id, provider: provider)
        let now = Timestamp.iso8601(Date())
        let mark = GoneMark(device: id, goneAt: now, removedBy: deviceID)
        _ = try provider.putIfAbsent(Device.registryEntryKey(id) + Device.goneSuffix, data: try mark.seal(keys: keys, store: storeID))
        try database.transaction {
            try SyncState(database: database).setGone(id, at: now)
            // The others apply of a gone device only what some device's published frontier
            // says it applied: this one's next sync publishes what it applied of it (as a
            // removal learned from `devices/` does), so no device is left without it.
            if (row.int("applied_seq") ?? 0) > 0 { try SyncFlags(database: database).markFrontierDue() }
        }
        return DeviceRemoval(id: id, name: row.string("name") ?? "", droppedChanges: dropped)
    }

    /// The lost values kept here, newest first.
    public func lostValues() throws -> [LostValue] {
        var values: [LostValue] = []
        try forEachLostValue { values.append($0) }
        return values
    }

    /// Calls `body` with each lost value kept here, newest first, read one at a time (a
    /// stepped query): never the whole list in memory, however many (`coven lost`).
    public func forEachLostValue(_ body: (LostValue) throws -> Void) throws {
        let statement = try database.prepare("""
            SELECT id, tbl, row_id, entry, stamp, device, winner_stamp, lost_at, why, restored_at FROM coven_lost_values ORDER BY id DESC
            """)
        while let row = try statement.next() {
            let entry = try RowEntryCodec.decode(row[3].bytesValue ?? []).first
            try body(LostValue(
                id: row[0].intValue ?? 0, table: row[1].textValue ?? "", rowID: row[2].textValue ?? "",
                values: Dictionary(zip(entry?.columns ?? [], entry?.values ?? []), uniquingKeysWith: { first, _ in first }),
                columns: entry?.columns ?? [], stamp: row[4].textValue ?? "", device: row[5].textValue ?? "",
                winnerStamp: row[6].textValue, lostAt: row[7].textValue ?? "", why: row[8].textValue ?? "",
                restoredAt: row[9].textValue))
        }
    }

    /// Forgets the lost values `ids`, in one transaction: none is forgotten unless all can be.
    /// Returns the ids forgotten.
    ///
    /// - Throws: `.notFound` for an unknown id; `.invalidState` for a row taken out for its
    ///   parent that has not come back (it still may, as on the devices where it never left).
    @discardableResult
    public func dropLost(_ ids: [Int64]) throws -> [Int64] {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        let known = Dictionary(try lostValues().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        for id in ids {
            guard let lost = known[id] else {
                throw CovenError(.notFound, "no lost value \(id)", hint: "'coven lost' lists them", details: ["lost": String(id)])
            }
            if lost.why == "parent_deleted" && lost.restoredAt == nil {
                throw CovenError(.invalidState, "lost value \(id) is a row taken out for its parent, which may still come back",
                                 hint: "it comes back by itself when a later write keeps the parent; drop it once it is marked restored",
                                 details: ["lost": String(id)])
            }
        }
        return try database.transaction { try SyncState(database: database).dropLost(ids: ids, before: nil) }
    }

    /// Forgets every lost value lost before `before` (every one when nil), but for rows taken
    /// out for their parent that have not come back. Returns the ids forgotten.
    @discardableResult
    public func dropLost(before: Date?) throws -> [Int64] {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        return try database.transaction { try SyncState(database: database).dropLost(ids: nil, before: before.map(Timestamp.iso8601)) }
    }

    /// Re-applies a lost value as a new write of this device (recorded, published at the next
    /// sync): the row takes the lost values, with a new stamp.
    ///
    /// - Throws: `.notFound` for an unknown id; `.invalidState` for a take-out or a value
    ///   already restored; `.fileUnknown` when it names a file record this device no longer
    ///   has; `.bytesAbsent` for an image of a file record naming bytes nobody holds.
    @discardableResult
    public func restoreLost(_ id: Int64) throws -> String {
        let lock = try device.lock(wait: true)
        defer { _ = lock }
        guard let lost = try lostValues().first(where: { $0.id == id }) else {
            throw CovenError(.notFound, "no lost value \(id)", hint: "'coven lost' lists them", details: ["lost": String(id)])
        }
        guard lost.restorable else {
            throw CovenError(.invalidState, "lost value \(id) is a row taken out (\(lost.why.replacingOccurrences(of: "_", with: " "))): it cannot be restored",
                             details: ["lost": String(id)])
        }
        guard lost.restoredAt == nil else {
            throw CovenError(.invalidState, "lost value \(id) was restored at \(lost.restoredAt ?? "")", details: ["lost": String(id)])
        }
        try refuseRecordNamingBytesNobodyHolds(lost)
        // The file records the value names that no row names now come back from their images
        // (FileRecords' register), as on the devices the restore reaches: only while their bytes
        // are held.
        var images: [String] = []
        for column in manifest.table(lost.table)?.files ?? [] {
            guard let file = lost.values[column.column]?.textValue, try device.fileRecord(file) == nil else { continue }
            guard let image = try device.fileRecords.image(file) else {
                throw CovenError(.fileUnknown, "lost value \(id) names file '\(file)', which this device no longer has", details: ["lost": String(id), "file": file])
            }
            try refuseNamingBytesNobodyHolds(image.coordinates, file: file, lost: lost)
            images.append(file)
        }
        return try database.transaction {
            try device.recordWrite { write in
                for file in images { _ = try device.fileRecords.bringBack(file) }
                let local = Set(try database.storedColumns(lost.table))
                let columns = lost.columns.filter { local.contains($0) }
                let values = columns.map { $0 == "_updated_at" ? .text(write.stamp) : (lost.values[$0] ?? .null) }
                // A file record's value no row names now goes to its image (FileRecords'
                // register), published as the record's: it comes back with a row that names it.
                var table = lost.table
                if table == "coven_files", try device.fileRecord(lost.rowID) == nil {
                    guard try device.fileRecords.image(lost.rowID) != nil else {
                        throw CovenError(.fileUnknown, "lost value \(id) is of file '\(lost.rowID)', which this device no longer has", details: ["lost": String(id), "file": lost.rowID])
                    }
                    table = "coven_deleted_files"
                }
                // The records the row named before and names no more go, as a write's do.
                let fileColumns = manifest.table(lost.table)?.files.map(\.column) ?? []
                let before = fileColumns.isEmpty ? nil : try database.queryOne(
                    "SELECT \(fileColumns.map(RowCapture.quote).joined(separator: ", ")) FROM main.\(RowCapture.quote(lost.table)) WHERE id = ?1", [lost.rowID])
                try database.run(RowEntry.upsertSQL(table: table, columns: columns), values)
                try device.fileRecords.release(fileColumns.compactMap { before?[$0].textValue }, stamp: write.stamp)
                try SyncState(database: database).markRestored(id)
                return write.stamp
            }
        }
    }
}

extension StoreSync {
    /// A lost image of a file record may come back only while the bytes it names are held: a
    /// stored object (gc keeps what a lost value names), or a copy on this device only that
    /// this device still records and finds. An image naming another device's copy, or a copy
    /// here that is gone (the losing side of two make-device-only switches: its copy went when
    /// the winner's arrived), would leave a record naming bytes nobody holds, and its arrival
    /// would remove the winner's copy: it is refused.
    ///
    /// - Throws: `.bytesAbsent`, naming the file.
    func refuseRecordNamingBytesNobodyHolds(_ lost: LostValue) throws {
        guard lost.table == "coven_files", let json = lost.values["coordinates"]?.textValue,
              let coordinates = try? Coordinates(json: json), coordinates.at == .device else { return }
        let file = lost.rowID
        guard coordinates.device == deviceID else {
            throw CovenError(.bytesAbsent, "lost value \(lost.id) says file '\(file)' is on device '\(coordinates.device ?? "")' only, whose copy went when this value lost",
                             hint: "restore the file from the device that holds it", details: ["lost": String(lost.id), "file": file, "device": coordinates.device ?? ""])
        }
        let recorded = try database.scalar("SELECT count(*) FROM coven_local WHERE object = ?1", [coordinates.object]).intValue ?? 0 > 0
        guard recorded, CheckedBytes(device).localSourceProblem(coordinates.object) == nil else {
            throw CovenError(.bytesAbsent, "lost value \(lost.id) says file '\(file)' is on this device only, whose copy is gone",
                             hint: "the file's bytes are where its record says now ('coven ls' shows it)", details: ["lost": String(lost.id), "file": file, "device": deviceID])
        }
    }

    /// A row's lost value that names a file record no row names now brings it back from its
    /// image: refused while its bytes are known to be gone (a stored object gc deleted, one
    /// storage does not hold, a copy on this device only that is gone).
    ///
    /// - Throws: `.bytesAbsent`, naming the file; `.storage`.
    func refuseNamingBytesNobodyHolds(_ coordinates: Coordinates, file: String, lost: LostValue) throws {
        let details = ["lost": String(lost.id), "file": file]
        switch coordinates.at {
        case .stored:
            guard try device.connectStorage().head(coordinates.object) == nil else { return }
            throw CovenError(.bytesAbsent, "lost value \(lost.id) names file '\(file)', whose stored bytes are gone", details: details)
        case .device:
            guard coordinates.device == deviceID else { return }
            let recorded = try database.scalar("SELECT count(*) FROM coven_local WHERE object = ?1", [coordinates.object]).intValue ?? 0 > 0
            guard !recorded || CheckedBytes(device).localSourceProblem(coordinates.object) != nil else { return }
            throw CovenError(.bytesAbsent, "lost value \(lost.id) names file '\(file)', which was on this device only and whose bytes are gone", details: details)
        }
    }

    /// Refuses to go on when this device was removed from the store for good (as the last
    /// listing of `devices/` said).
    ///
    /// - Throws: `.deviceGone`.
    /// When this device was removed from the store for good, as the last sync learned; nil
    /// while it is a live device.
    public func removedAt() throws -> String? {
        guard let row = try database.queryOne("SELECT gone, gone_at FROM coven_device_registry WHERE device = ?1", [deviceID]), row.int("gone") == 1 else {
            return nil
        }
        return row.string("gone_at") ?? ""
    }

    func refuseIfGone() throws {
        guard try database.scalar("SELECT gone FROM coven_device_registry WHERE device = ?1", [deviceID]).intValue == 1 else { return }
        // A join works for a member still on the roster, never for one removed from the store.
        let offRoster = Members(device).readsNewestGeneration() == false
        throw CovenError(.deviceGone, "this device ('\(deviceName)', \(deviceID)) was removed from the store",
                         hint: offRoster ? "this device's member is not on the store's newest roster either (removed, or its keys replaced): if it was removed, "
                             + Members.removedHint : "make a new device with 'coven join'",
                         details: ["device": deviceID])
    }

    /// Makes this device's signing key if it has none (a device made before signing keys) and
    /// registers its public half, replacing the device's own entry in `devices/`.
    ///
    /// - Throws: `.io` when the key file is missing although this device registered a key:
    ///   a new key would sign changes every other device refuses (``Keyring/signingKey()``).
    func ensureSigningKey() throws {
        guard !keys.hasSigningKeyFile else { return }
        if try keys.registeredPublicKey() != nil { _ = try keys.signingKey() }
        let key = try DeviceSigningKey()
        let joinedAt = try database.scalar("SELECT joined_at FROM coven_device_registry WHERE device = ?1", [deviceID]).textValue ?? Timestamp.iso8601(Date())
        let entry = DeviceEntry(device: deviceID, name: deviceName, joinedAt: joinedAt, publicKey: key.publicKey)
        // Registered before it is kept: a crash between the two makes a new key next time,
        // replacing the entry again; no change was signed by the lost one.
        try storage().put(entry.path, data: try entry.seal(keys: keys))
        try keys.adopt(signingKey: key)
        try database.transaction {
            try SyncState(database: database).learnDevice(deviceID, name: deviceName, joinedAt: joinedAt, publicKey: key.publicKey.hex)
        }
    }

    /// Stores this device's manifest as the store's (`manifest`, sealed), for the devices that
    /// join next: `coven migrate` calls it after migrating.
    public func publishManifest() throws {
        try DeviceSetup.publishManifest(manifest, provider: try storage(), keys: keys, replace: true)
    }
}
