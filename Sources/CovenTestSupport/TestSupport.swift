import CovenKit
