import CovenKit
import Foundation

/// The kind of store a test makes: the one a plain `coven init` makes (a store of members, its
/// first device the owner's), or the variant a test asks for by name (`coven init --no-member`:
/// one key every device holds).
public enum TestStoreKind: String, Sendable, CaseIterable {
    /// A store of members: the store's first member (named ``TestStores/owner``) is established
    /// on the first device, as `coven init` does; other devices join with that member's identity.
    case members
    /// A store of one key, as `coven init --no-member` makes it.
    case noMember = "no-member"
}

/// Stores and devices for tests, made the way the commands make them, so that tests run on the
/// store people get unless they name the other kind.
public enum TestStores {
    /// The name of the member a store of members starts with.
    public static let owner = "alice"

    /// Makes a store at `storage` and its first device, the way `coven init` does for `kind`.
    ///
    /// - Parameters:
    ///   - provider: a provider connected to `storage`; one is connected (making a `file://`
    ///     folder) when nil.
    ///   - environment: the S3 credentials the device uses afterwards.
    public static func create(paths: DevicePaths, storage: StorageLocation, manifest: Manifest, name: String?,
                              provider: StorageProvider? = nil, environment: [String: String]? = nil,
                              kind: TestStoreKind = .members) throws -> Device {
        let device = try provider.map { try DeviceSetup.create(paths: paths, storage: storage, manifest: manifest, name: name, provider: $0) }
            ?? DeviceSetup.create(paths: paths, storage: storage, manifest: manifest, name: name)
        if let environment { device.storageEnvironment = environment }
        if kind == .members { try Members(device).establish(name: owner) }
        return device
    }

    /// Joins another device to the store `first` is in, the way a person would for its kind: with
    /// the identity of `first`'s member in a store of members, with the store key otherwise.
    public static func join(paths: DevicePaths, from first: Device, name: String?, environment: [String: String]? = nil,
                            started: (SnapshotJoin) -> Void = { _ in }) throws -> Device {
        if try Members(first).memberID() != nil {
            let identity = try MemberIdentity(contentsOf: first.paths.memberIdentity)
            return try DeviceSetup.join(paths: paths, storage: first.storage, identity: identity, name: name, environment: environment, started: started)
        }
        return try DeviceSetup.join(paths: paths, storage: first.storage, storeKey: try first.keys.storeKeyBytes(), name: name, environment: environment, started: started)
    }

    /// The identity of the member `device` belongs to; nil in a store without members.
    public static func identity(of device: Device) throws -> MemberIdentity? {
        guard try Members(device).memberID() != nil else { return nil }
        return try MemberIdentity(contentsOf: device.paths.memberIdentity)
    }
}
