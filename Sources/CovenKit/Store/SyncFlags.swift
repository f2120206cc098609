import Foundation

/// What sync must remember between runs, each with a name of its own (`coven_sync_flags`,
/// whose one writer this is): work due at the next push, what the last pull could not read,
/// problems to report, and when this device last pushed and pulled. Before schema step 22 these
/// were keys of `coven_meta` set from six places in three folders; now each is a method here,
/// and a reader finds every place that sets one by its name.
///
/// ```swift
/// let flags = SyncFlags(database: device.database)
/// try flags.markFrontierDue()        // a pull applied something: the next push says so
/// if try flags.frontierDue { … }     // the push publishes its frontier, then clears it
/// ```
///
/// Every method runs inside the caller's transaction (or is one statement).
struct SyncFlags {
    let database: Database

    private var journal: Journal { Journal(database: database, table: "coven_sync_flags") }

    // MARK: Due at the next push

    /// Whether the next push publishes this device's frontier even with nothing to send: it
    /// applied changes, switched a file's place or started from a snapshot, and gc on the
    /// other devices waits to see that.
    var frontierDue: Bool { get throws { try journal.value("frontier_due") == "1" } }
    func markFrontierDue() throws { try journal.set("frontier_due", "1") }
    func clearFrontierDue() throws { try journal.set("frontier_due", nil) }

    /// Whether the next push looks again at rows a gate kept back (a gate's rule changed).
    var gateDue: Bool { get throws { try journal.value("gate_due") == "1" } }
    func markGateDue() throws { try journal.set("gate_due", "1") }
    func clearGateDue() throws { try journal.set("gate_due", nil) }

    /// The changes whose section the last pull held no key for, by device (JSON of a
    /// frontier), nil when none.
    var keyUnavailable: String? { get throws { try journal.value("key_unavailable") } }
    func setKeyUnavailable(_ json: String?) throws { try journal.set("key_unavailable", json) }

    /// The damage and gaps the last sync met (``ChangeDamage``'s text), nil when none.
    var problems: String? { get throws { try journal.value("problems") } }
    func setProblems(_ text: String?) throws { try journal.set("problems", text) }

    /// This device's own changes storage lost or damaged, to publish again (seqs, comma-separated).
    var republish: String? { get throws { try journal.value("republish") } }
    func setRepublish(_ text: String?) throws { try journal.set("republish", text) }

    /// Removal marks this device refused (JSON), nil when none.
    var refusedRemovals: String? { get throws { try journal.value("refused_removals") } }
    func setRefusedRemovals(_ json: String?) throws { try journal.set("refused_removals", json) }

    /// The key chains storage holds behind what this device learned (``ChainLosses``' JSON).
    var keyChainsBehind: String? { get throws { try journal.value("key_chains_behind") } }
    func setKeyChainsBehind(_ json: String?) throws { try journal.set("key_chains_behind", json) }

    // MARK: What was last done

    /// When this device last pushed and pulled (ISO 8601), for `status`.
    var lastPush: String? { get throws { try journal.value("last_push") } }
    var lastPull: String? { get throws { try journal.value("last_pull") } }
    func notePush(at time: String) throws { try journal.set("last_push", time) }
    func notePull(at time: String) throws { try journal.set("last_pull", time) }

    /// The last mass delete a pull applied (the trash's JSON), for `status`.
    var lastMassDelete: String? { get throws { try journal.value("last_mass_delete") } }
    func setLastMassDelete(_ json: String?) throws { try journal.set("last_mass_delete", json) }
}
