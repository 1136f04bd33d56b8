// Package archtest holds a test that keeps imports where the house style
// puts them (../shared/docs/style.md, "The shape of the house").
package archtest
