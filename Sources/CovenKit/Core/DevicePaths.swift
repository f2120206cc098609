import Foundation

/// Where a device keeps its things: the database, and the folder beside it (`<db>.d/`) holding
/// the lock, the store key, coven's own copies of app files, the cache and partial downloads.
public struct DevicePaths: Sendable {
    /// The device database.
    public let database: String
    /// The folder beside it.
    public let folder: String

    /// Paths for the database at `database`.
    public init(database: String) {
        self.database = database
        self.folder = database + ".d"
    }

    /// The advisory lock file that mutating commands hold.
    public var lock: String { folder + "/lock" }
    /// The store key (32 bytes, mode 0600).
    public var storeKey: String { folder + "/store.key" }
    /// This device's Ed25519 signing key (its seed, mode 0600), which signs its changes.
    public var signingKey: String { folder + "/device.key" }
    /// The identity of the member this device belongs to (mode 0600; `coven member export`).
    public var memberIdentity: String { folder + "/member.identity" }
    /// The keys of the audiences' generations this device's member opened (mode 0600).
    public var audienceKeys: String { folder + "/audience.keys" }
    /// coven's own copies of app-provided files, by file id.
    public var copies: String { folder + "/copies" }
    /// Fetched file bytes, by file id.
    public var cache: String { folder + "/cache" }
    /// Partial downloads.
    public var partial: String { folder + "/partial" }
    /// Temporary files of this device (written, synced, then renamed into place).
    public var temporary: String { folder + "/tmp" }

    /// The database path a command uses: `--db`, else `COVEN_DB`, else
    /// `$XDG_DATA_HOME/coven/device.db` (`~/.local/share/coven/device.db`).
    public static func databasePath(option: String?, environment: [String: String]) -> String {
        if let option, !option.isEmpty { return absolute(option) }
        if let env = environment["COVEN_DB"], !env.isEmpty { return absolute(env) }
        let dataHome: String
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            dataHome = xdg
        } else {
            dataHome = (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        }
        return dataHome + "/coven/device.db"
    }

    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        return FileManager.default.currentDirectoryPath + "/" + path
    }
}
