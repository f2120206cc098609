import CovenKit
import Foundation

/// How `coven members`, `circles` and `status` say that storage lost key generations.
enum KeyChainLossText {
    /// One line: the audience, the missing object, and both generations.
    static func describe(_ loss: KeyChainLoss) -> String {
        let audience = loss.audience == "store" ? "the store's key" : "circle \(loss.audience)'s key"
        return "storage's chain of \(audience) is behind this device's: it ends at generation \(loss.storageGeneration), this device holds \(loss.heldGeneration); "
            + "'\(loss.object)' is missing (put it back from a newer copy of the storage; nothing is published on the shorter chain)"
    }

    /// `{"audience", "object", "storage_generation", "held_generation"}`.
    static func json(_ loss: KeyChainLoss) -> [String: Any] {
        ["audience": loss.audience, "object": loss.object, "storage_generation": loss.storageGeneration, "held_generation": loss.heldGeneration]
    }
}
