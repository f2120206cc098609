import Foundation

extension Statement {
    /// Binds `values` in order from parameter 1, as ``bind(_:)`` does, with no array of
    /// existentials made of them (a pull binds every row's values so: 100,000 arrays of
    /// boxed values, one a row, where the values are already `SQLValue`s).
    public func bind(values: [SQLValue]) throws {
        for index in values.indices {
            try bind(values[index], at: Int32(index + 1))
        }
    }
}
