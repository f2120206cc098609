// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "coven",
    products: [
        .executable(name: "coven", targets: ["coven"]),
        .library(name: "CovenKit", targets: ["CovenKit"]),
    ],
    targets: [
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CGcrypt", providers: [.apt(["libgcrypt20-dev"])]),
        .systemLibrary(name: "CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CArchive", providers: [.apt(["libarchive-dev"])]),
        .systemLibrary(name: "CLinux"),
        // One loop of coven's own in C: SHA-256 of two chunks at once on the SHA extensions
        // (Sources/CovenSHA256/sha256_pair.c says why). Optimized in debug builds too: the
        // tests stage and upload through it, and unoptimized it is 15 times slower.
        .target(name: "CovenSHA256", cSettings: [.unsafeFlags(["-O2"])]),
        .target(
            name: "CovenKit",
            dependencies: ["CSQLite", "CGcrypt", "CCurl", "CArchive", "CLinux", "CovenSHA256"],
            // Each folder's README says what lives there and what it may use.
            exclude: ["Core", "Crypto", "Storage", "Store", "Keys", "Writes", "Files", "Read", "Upload", "Sync", "Members", "Snapshot",
                      "GC", "Fsck", "DeviceOnly", "Moves", "Status", "Trash", "Open"].map { $0 + "/README.md" }
        ),
        .executableTarget(name: "coven", dependencies: ["CovenKit", "CLinux"]),
        .target(name: "CovenTestSupport", dependencies: ["CovenKit"]),
        .testTarget(name: "CovenKitTests", dependencies: ["CovenKit", "CovenTestSupport"], exclude: ["Fixtures"]),
        // The CLI tests `@testable import coven`: SwiftPM builds an executable target testable,
        // so the parser, help, docs and completion renderers stay in Sources/coven beside the
        // commands (Sources/coven/Commands/<Name>Command.swift), and depending on the target also
        // builds the binary the golden cases run.
        .testTarget(name: "CovenCLITests", dependencies: ["coven", "CovenTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
