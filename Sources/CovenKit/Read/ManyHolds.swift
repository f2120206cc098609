import Foundation

/// One file of a `coven get` of many: its id as given and the held copy, or why it failed.
public struct HoldOutcome: Sendable {
    public var file: String
    public var result: Result<(path: String, report: ReadReport), CovenError>
}

/// What a `coven get` of many did.
public struct HoldSummary: Sendable, Equatable {
    public var held = 0
    public var failed = 0
}

/// `coven get FILE...` and `coven get --files-from`: makes sure each file of a list is held
/// whole on this device, several at once, reporting them in the order of the list. Paid per
/// batch, as fetch-kept (``Device/runFetches(_:parallel:)``): the files not held at all are
/// fetched by workers that touch no database, then made durable by one sync of the cache's
/// filesystem and recorded in one transaction, and only then reported; the others are held as
/// a single `get` holds one (``Device/holdFile(_:stop:)``). The ids are read a window at a
/// time, never far ahead of the first file not yet reported, so memory stays bounded whatever
/// the count; a file that fails is reported as failed and the others go on.
public struct ManyHolds {
    let device: Device

    /// Files fetched at once, each on a connection of its own (fetch-kept's count).
    public static let atOnce = KeptFiles.keptFetchesAtOnce

    public init(device: Device) {
        self.device = device
    }

    /// Holds every file `next` gives (nil ends the list), `parallel` at once, and calls
    /// `report` with each outcome in the order of the list (an id given again while the first
    /// is in flight is held once, and reported at each place).
    ///
    /// - Throws: `.interrupted` when `stop` is asked (the files held before stay held, their
    ///   outcomes reported); an error of `next` or `report`.
    public func hold(stop: Stop = Stop(), parallel: Int = ManyHolds.atOnce, next: @escaping () throws -> String?,
                     report: @escaping (HoldOutcome) throws -> Void) throws -> HoldSummary {
        try stop.check("get")
        var summary = HoldSummary()
        let run = FetchRun(mode: .hold, command: "get", stop: stop, next: next) { file, outcome in
            switch outcome.result {
            case .success: summary.held += 1
            case .failure: summary.failed += 1
            }
            try report(HoldOutcome(file: file, result: outcome.result))
        }
        try KeptFiles(device).runFetches(run, parallel: parallel)
        return summary
    }
}
