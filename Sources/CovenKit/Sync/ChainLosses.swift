import Foundation

/// Key generations storage lost (DESIGN.md "Principals and keys"), as this device last found
/// them, for `coven status`: the one owner of that record.
///
/// The failure story: a NAS is put back from a backup older than the store's last removal, so
/// `audiences/store/<N>` is gone and generation N-1 is storage's newest. An admin's next `member
/// add` built generation N again on N-1, whose roster still holds the removed member: the
/// removed member read everything after. The rule: a device never builds on a chain that ends
/// below the generation it holds (``AudienceChain/checkReaches(_:)``), and says which object
/// storage lost; every command that reads the chain refuses with `integrity` naming it, and
/// the sync that found it leaves word here so `coven status` shows it without storage. It does
/// not apply to a device that never learned the lost generation: it cannot tell, and the
/// devices that did refuse the chain it builds on (``AudienceChain`` checks each held key).
/// One audience whose chain of key generations in storage ends below the generation this
/// device holds: storage lost generations (``ChainLosses``).
public struct KeyChainLoss: Equatable, Sendable {
    /// The store's (`store`) or a circle's id.
    public var audience: String
    /// The first generation missing from storage (`audiences/<audience>/<gen>`).
    public var object: String
    /// Storage's newest generation of the audience.
    public var storageGeneration: UInt64
    /// The newest generation this device holds.
    public var heldGeneration: UInt64
}

struct ChainLosses {
    let device: Device


    typealias Loss = KeyChainLoss

    /// Runs `check` (a read of an audience's chain): a loss it finds (an `integrity` error with
    /// reason `behind`) is recorded before the error goes on; a check that passes clears the
    /// record of `audience`. On a device opened to read, only the check runs.
    func recording<T>(_ audience: String, _ check: () throws -> T) throws -> T {
        do {
            let result = try check()
            try update(audience, nil)
            return result
        } catch let error as CovenError where error.code == .integrity && error.details["reason"] == "behind" {
            try? update(audience, Self.loss(error))
            throw error
        }
    }

    /// The loss an `integrity` error of reason `behind` names.
    static func loss(_ error: CovenError) -> Loss? {
        guard error.details["reason"] == "behind", let audience = error.details["audience"], let object = error.details["object"],
              let storage = error.details["storage_generation"].flatMap({ UInt64($0) }),
              let held = error.details["held_generation"].flatMap({ UInt64($0) }) else { return nil }
        return Loss(audience: audience, object: object, storageGeneration: storage, heldGeneration: held)
    }

    /// What the last reads found, by audience.
    func all() throws -> [Loss] {
        guard let text = try SyncFlags(database: device.database).keyChainsBehind,
              let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: [String: Any]] else { return [] }
        return object.keys.sorted().compactMap { audience in
            guard let item = object[audience], let path = item["object"] as? String,
                  let storage = (item["storage_generation"] as? NSNumber)?.uint64Value,
                  let held = (item["held_generation"] as? NSNumber)?.uint64Value else { return nil }
            return Loss(audience: audience, object: path, storageGeneration: storage, heldGeneration: held)
        }
    }

    private func update(_ audience: String, _ loss: Loss?) throws {
        guard !device.readOnly else { return }
        var current = Dictionary(uniqueKeysWithValues: try all().map { ($0.audience, $0) })
        guard current[audience] != loss else { return }
        current[audience] = loss
        let object = current.mapValues { ["object": $0.object, "storage_generation": $0.storageGeneration, "held_generation": $0.heldGeneration] as [String: Any] }
        let text = current.isEmpty ? nil : String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
        try SyncFlags(database: device.database).setKeyChainsBehind(text)
    }
}
