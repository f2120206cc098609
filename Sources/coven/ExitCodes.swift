import CovenKit

/// The exit status of each error class; docs/exit-codes.md is the contract.
///
/// The switch is exhaustive with no default: a new error code forces a decision here.
enum ExitCodes {
    static let success: Int32 = 0
    static let failure: Int32 = 1
    static let usage: Int32 = 2
    static let notFound: Int32 = 3
    static let refused: Int32 = 4
    static let storage: Int32 = 5
    static let integrity: Int32 = 6
    static let noRoom: Int32 = 7
    static let updateRequired: Int32 = 8
    static let busy: Int32 = 9
    static let partial: Int32 = 10
    static let interrupted: Int32 = 130

    static func code(for error: ErrorCode) -> Int32 {
        switch error {
        case .usage: return usage
        case .fileUnknown, .fileAbsent, .missing, .userFileMissing, .bytesAbsent, .noDevice, .notFound:
            return notFound
        case .fileUnreferenced, .fileWriteOnce, .boundFileTooLarge, .namespaceKind, .undeclaredNamespace,
             .deviceOnly, .remoteRoot, .notThisDevice, .notDeviceOnlyHere, .fileInMove, .notInCloud, .rangeOutOfBounds,
             .notUnicode, .link, .exists, .clash, .empty, .manifest, .schema, .migration, .sql, .invalidId,
             .alreadyExists, .invalidState, .userFileChanged, .fileUnavailable, .deviceConflict, .deviceGone,
             .notAdmin, .refused, .keyUnavailable, .notOwner, .notInCircle:
            return refused
        case .storage, .noStorage:
            return storage
        case .integrity, .decoding:
            return integrity
        case .noRoom, .storageFull:
            return noRoom
        case .updateRequired:
            return updateRequired
        case .busy:
            return busy
        case .partial:
            return partial
        case .interrupted:
            return interrupted
        case .io, .internal:
            return failure
        }
    }
}
